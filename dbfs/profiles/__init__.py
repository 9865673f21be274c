"""Cluster profiles: where their names resolve, what their keys may hold, and scheduler addresses.

Contract
--------
- :func:`load_profile` returns a checked profile or raises a one-line
  :class:`~dbfs.errors.DbfsError` naming the file, the key and the fix: a
  file that is not YAML (a ``!!python`` tag included: profiles are read with
  ``yaml.safe_load``), not a mapping, an unknown type or key, a value of the
  wrong type, a count below 1, a size Dask cannot read (``memory_limit:
  lots``), a port outside 0-65535, a SLURM time SLURM cannot read, or a
  scheduler address that is not one (:data:`SCHEMA`). The CLI checks a
  ``--cluster`` profile when it reads the flag, before any other work, even
  when no cluster will start.
- :func:`address_problem` says why a ``--scheduler`` value or a profile's
  ``address`` is not a Dask scheduler address (None when it is one);
  :func:`check_cluster_args` makes it, and a ``--workers`` below 1, a
  one-line error; :func:`check_port` one for a port of 127.0.0.1 that a
  local cluster cannot take.

Encoding
--------
A profile is a YAML mapping with ``type: local | local-gpu | slurm |
scheduler`` and the keys of that type in :data:`SCHEMA` (this folder's
``README.md``). A NAME resolves through :func:`profile_dirs`; a value with
a suffix is a file path.
"""
from __future__ import annotations

import difflib
import os
import socket
from importlib.resources import files
from pathlib import Path

import yaml
from dask.utils import parse_bytes

from dbfs.errors import DbfsError
from dbfs.units import slurm_seconds

__all__ = ["PROFILES_ENV", "SCHEMA", "profile_dirs", "profile_names", "load_profile", "address_problem",
           "check_cluster_args", "check_port"]

PROFILES_ENV = "DBFS_PROFILES"


def profile_dirs() -> list:
    """Where profile NAMES are looked up, in order: the folders of
    ``$DBFS_PROFILES`` (os.pathsep-separated, a user's own profiles), then the
    profiles shipped inside the package (importlib.resources, so they resolve
    after a non-editable install)."""
    own = [Path(d).expanduser() for d in os.environ.get(PROFILES_ENV, "").split(os.pathsep) if d]
    return own + [files("dbfs") / "profiles"]


def profile_names() -> list:
    """The profile names :func:`load_profile` resolves."""
    names = set()
    for d in profile_dirs():
        if d.is_dir():
            names |= {f.name[:-5] for f in d.iterdir() if f.name.endswith(".yaml")}
    return sorted(names)


def _profile_text(name_or_path: str):
    """(text, where) of a profile: a YAML path, or a NAME from :func:`profile_dirs`."""
    p = Path(name_or_path)
    if p.suffix:
        try:
            return p.read_text(), str(p)
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) else "not text"
            raise DbfsError(f"cluster profile {p} cannot be read ({why}): pass a YAML file or a profile "
                            f"name ({', '.join(profile_names())})") from None
    for d in profile_dirs():
        f = d / f"{name_or_path}.yaml"
        if f.is_file():
            return f.read_text(), str(f)
    raise DbfsError(f"cluster profile {name_or_path} not found: use one of {', '.join(profile_names())}, a YAML file, "
                    f"or a folder of your own in ${PROFILES_ENV}")


def load_profile(name_or_path: str) -> dict:
    """A checked cluster profile (YAML): a path, or a NAME (see :func:`profile_dirs`).

    A ``type: slurm`` profile gets its defaults filled (processes and jobs 1,
    wait 600 s).
    """
    text, p = _profile_text(name_or_path)
    try:
        prof = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DbfsError(f"cluster profile {p} is not valid YAML ({e.__class__.__name__}): fix the file") from None
    prof = {} if prof is None else prof
    if not isinstance(prof, dict):
        raise DbfsError(f"cluster profile {p} must be a mapping of keys (type: local, ...), not a "
                        f"{type(prof).__name__}: see dbfs/profiles/README.md")
    _check_schema(prof, p)
    if prof["type"] == "slurm":
        missing = [k for k in ("cores", "memory") if not prof.get(k)]
        if missing:
            raise DbfsError(f"cluster profile {p} needs {' and '.join(missing)} (per SLURM job) for type: slurm")
        prof.update(processes=prof.get("processes") or 1, jobs=prof.get("jobs") or 1, wait=prof.get("wait") or 600)
        cores, processes = prof["cores"], prof["processes"]
        if cores % processes:
            raise DbfsError(f"cluster profile {p}: cores ({cores}) must be a multiple of processes "
                            f"({processes}), each worker process getting cores / processes threads")
    return prof


def _bytes(v) -> int | None:
    """Dask's reading of a size (what the workers will be given), None when it cannot read it."""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        return None
    try:
        return int(parse_bytes(v))
    except (ValueError, TypeError):
        return None


def _slurm_time(v) -> bool:
    return isinstance(v, str) and (v.strip().lower() in ("infinite", "unlimited") or bool(slurm_seconds(v)))


_POS = ("a positive integer", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1)
_STR = ("a string", lambda v: isinstance(v, str))
_SIZE = ("a size such as 4GiB or a number of bytes", lambda v: (_bytes(v) or 0) > 0)
_MEM = ("a size such as 4GiB, a number of bytes, or auto", lambda v: v == "auto" or (_bytes(v) or 0) > 0)
_TIME = ("a SLURM time in quotes such as \"01:00:00\" or \"2-00:00:00\"", _slurm_time)
_PORT = ("a port number 1-65535 (0 or null: any free port)",
         lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 65535)
_ADDR = ("a scheduler address such as tcp://host:8786", lambda v: isinstance(v, str) and address_problem(v) is None)
_LIST = ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))
_NUM = ("a positive number of seconds", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)
_BOOL = ("true or false", lambda v: isinstance(v, bool))
_NONNEG = ("a non-negative integer", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0)
_GPUS = ("a list of device numbers or a string such as \"0,1\"",
         lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, int) for x in v)))

#: the keys of each profile type and what each value must be (null is always allowed: the default)
SCHEMA = {
    "local": {"workers": _POS, "threads_per_worker": _POS, "memory_limit": _MEM, "scheduler_port": _PORT,
              "dashboard_port": _PORT, "bind_cores": _BOOL},
    "local-gpu": {"gpus": _GPUS, "threads_per_gpu_worker": _POS, "cpu_workers": _NONNEG, "cpu_threads": _POS,
                  "memory_limit": _MEM, "wait": _NUM, "scheduler_port": _PORT, "dashboard_port": _PORT},
    "scheduler": {"address": _ADDR},
    "slurm": {"jobs": _POS, "cores": _POS, "memory": _SIZE, "processes": _POS, "queue": _STR, "account": _STR,
              "walltime": _TIME, "interface": _STR, "local_directory": _STR, "log_directory": _STR,
              "job_extra_directives": _LIST, "job_script_prologue": _LIST, "python": _STR, "wait": _NUM,
              "gpus_per_job": _NONNEG, "gpu_threads": _POS, "cpu_workers_per_job": _NONNEG, "cpu_threads": _POS},
}


def _check_schema(prof: dict, p) -> None:
    """Unknown keys (with the closest known one), wrong types and out-of-range values are one-line errors."""
    kind = prof.get("type")
    if kind not in SCHEMA:
        raise DbfsError(f"cluster profile {p}: type is {kind!r}: use type: local, local-gpu, slurm or scheduler")
    keys = SCHEMA[kind]
    for k in prof:
        if k == "type":
            continue
        if k not in keys:
            near = difflib.get_close_matches(str(k), list(keys), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise DbfsError(f"cluster profile {p} has unknown key {k!r}: {hint}the {kind} keys are "
                            f"{', '.join(sorted(keys))}")
        what, ok = keys[k]
        if prof[k] is not None and not ok(prof[k]):
            raise DbfsError(f"cluster profile {p}: {k} is {prof[k]!r}: use {what} (or null for the default)")
    if kind == "scheduler" and not prof.get("address"):
        raise DbfsError(f"cluster profile {p}: type scheduler needs an address (e.g. tcp://host:8786)")


_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")


def address_problem(address: str) -> str | None:
    """Why ``address`` is not a Dask scheduler address (``[tcp|tls|ucx|ws|wss://]HOST:PORT`` or
    ``inproc://...``), or None when it is one. Nothing is contacted."""
    text = str(address).strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme not in _SCHEMES:
        return f"unknown protocol {scheme!r} (use {', '.join(_SCHEMES)})"
    if scheme == "inproc":
        return None if rest else "no address after inproc://"
    host, colon, port = rest.rpartition(":")
    if not colon or not port.isdigit():
        return "no port number"
    if not host or "/" in host or " " in host:
        return "no host name"
    if not 0 < int(port) < 65536:
        return f"port {port} is outside 1-65535"
    return None


def check_cluster_args(scheduler: str | None = None, n_workers: int | None = None) -> None:
    """One-line errors for a ``--scheduler`` that is no address and a ``--workers`` below 1 (nothing contacted)."""
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1):
        raise DbfsError(f"--workers {n_workers} is not a number of worker processes: give 1 or more, or drop "
                        f"--workers for one per core")
    if scheduler and scheduler != "threads":
        problem = address_problem(scheduler)
        if problem:
            raise DbfsError(f"--scheduler {scheduler!r} is not a Dask scheduler address ({problem}): use "
                            f"tcp://HOST:PORT (e.g. tcp://127.0.0.1:8786), or 'threads' to run without a cluster")


def check_port(port: int, what: str) -> None:
    """A one-line error when ``port`` of 127.0.0.1 is taken (0: any free port, never taken)."""
    if not port:
        return
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)    # as the servers bind: TIME_WAIT is no conflict
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise DbfsError(f"{what} {port} on 127.0.0.1 is not free ({e.strerror}): another cluster may hold it; "
                            f"stop it, join it with --scheduler, or pick another port") from None
