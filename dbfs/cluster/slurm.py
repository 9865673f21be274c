"""What SLURM says about a dbfs request, and how its jobs are stopped on every exit path.

Contract
--------
- Pure readers of SLURM's output, tested on captured text without a SLURM:
  :func:`parse_squeue` and :func:`classify` (is a pending job queued, or will
  SLURM never start it, and which profile keys would change that),
  :func:`sbatch_failure` (sbatch's reason as one line naming the keys),
  :func:`parse_sinfo` and :func:`check_fit` (does a profile's request fit a
  node of its partition: cores, memory, walltime, partition state, and room
  for all its jobs at once).
- :func:`check_request` asks ``sinfo`` (``dbfs cluster PROFILE --check``),
  submitting nothing; :func:`squeue_states` asks ``squeue`` about job ids;
  :func:`scancel` cancels a process's jobs by name and by id.
- :func:`guard_signals`: while SLURM jobs are up, SIGTERM and SIGHUP (where
  their handler is the default) raise ``SystemExit(128 + signum)`` in the
  main thread so that the ``finally`` blocks that cancel the jobs run; the
  last :func:`unguard_signals` restores the handlers. :func:`held_signals`
  defers SIGINT/SIGTERM/SIGHUP while jobs are being cancelled.

Method
------
A job is judged by its ``squeue`` state and pending reason: the reasons with
which SLURM never starts a job as requested (PartitionConfig, per-job QOS
limits, bad constraints, invalid account, ...) are listed below with the
profile keys that decide them; ReqNodeNotAvail is hopeless only when the
request fits no node of the partition (:func:`check_fit`), otherwise the
nodes are merely down, drained or reserved. Every job of a process carries a
name unique to it (:func:`job_name`), so ``scancel --name`` also reaches a
job whose id was never recorded.

Encoding
--------
``squeue -h -t all -j IDS -o "%i|%T|%r"``: job id, state, pending reason.
``sinfo -h -N -o "%P|%N|%c|%m|%t|%l|%a|%B"``: partition (``*`` marks the
default), node, CPUs, memory (MiB), node state, partition time limit,
partition availability, max CPUs per node for the partition's jobs.
Memory as dask-jobqueue books it: ``--mem`` is the profile's bytes (Dask
units, ``4GB`` = 4e9) rounded up to whole GiB (MiB below 1 GiB).

References: SLURM 22.05 man pages squeue(1) ("JOB REASON CODES", "JOB STATE
CODES"), sinfo(1), sbatch(1), scancel(1).
"""
from __future__ import annotations

import contextlib
import math
import os
import pwd
import re
import secrets
import signal
import subprocess
import threading
from typing import NamedTuple

from dask.utils import parse_bytes

from dbfs.errors import DbfsError
from dbfs.progress import say
from dbfs.units import slurm_seconds

__all__ = ["job_name", "parse_squeue", "classify", "describe", "sbatch_failure", "parse_sinfo", "slurm_seconds",
           "request_mib", "check_fit", "check_request", "sinfo_nodes", "squeue_states", "scancel", "guard_signals",
           "unguard_signals", "held_signals"]

SQUEUE_FORMAT = "%i|%T|%r"
SINFO_FORMAT = "%P|%N|%c|%m|%t|%l|%a|%B"


def job_name() -> str:
    """The SLURM job name of this process's worker jobs (``dbfs-<pid>-<hex>``).

    Returns
    -------
    str
        A name no other dbfs process of the same user is likely to share, so
        ``scancel --name`` cancels exactly this process's jobs.
    """
    return f"dbfs-{os.getpid()}-{secrets.token_hex(2)}"


def _run(cmd: list, timeout: float = 30) -> tuple:
    """(returncode, stdout, stderr) of a SLURM command; 127 when it is not on PATH."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, "", f"{cmd[0]} is not on PATH"
    except subprocess.TimeoutExpired:
        return 124, "", f"{cmd[0]} did not answer within {timeout:.0f} s"
    return p.returncode, p.stdout, p.stderr


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else ""


# --- squeue: job states and pending reasons ---------------------------------------------------------------------

_RUNNING = {"RUNNING", "CONFIGURING", "RESIZING"}
_ENDED = {"COMPLETED", "COMPLETING", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
          "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"}

# pending reasons with which a job never starts: (what it means, the profile keys to change)
_NEVER = {
    "PartitionConfig": ("the request exceeds what the partition allows", ("cores", "memory", "walltime", "queue")),
    "PartitionTimeLimit": ("walltime exceeds the partition's time limit", ("walltime", "queue")),
    "PartitionNodeLimit": ("the node count is outside the partition's limits", ("queue", "job_extra_directives")),
    "BadConstraints": ("no node satisfies the job's constraints", ("job_extra_directives", "cores", "memory")),
    "InvalidAccount": ("the account is not valid", ("account",)),
    "InvalidQOS": ("the QOS is not valid", ("job_extra_directives", "account")),
    "AccountNotAllowed": ("the account may not use the partition", ("account", "queue")),
    "QOSNotAllowed": ("the QOS may not use the partition", ("job_extra_directives", "queue")),
    "DependencyNeverSatisfied": ("its dependency can never be satisfied", ("job_extra_directives",)),
    "JobHeldUser": ("the job is held (--hold)", ("job_extra_directives",)),
    "JobHeldAdmin": ("an administrator holds the job", ("queue", "account")),
}
# QOS/association limits on ONE job (not on a group's running total): never satisfied by waiting
_PER_JOB = re.compile(r"^(?:QOS|Assoc)(?:Max\w*Per(?:Job|Node)\w*|Min\w+)$")
_LIMIT_KEYS = (("Wall", ("walltime",)), ("CpuMinutes", ("cores", "walltime")), ("Cpu", ("cores",)),
               ("Mem", ("memory",)))
# the request may be impossible, or the nodes merely down/drained/reserved: decided by check_fit
_MAYBE = ("ReqNodeNotAvail", "Nodes required for job are DOWN")


def parse_squeue(text: str) -> dict:
    """Jobs in ``squeue -h -o "%i|%T|%r"`` output.

    Parameters
    ----------
    text : str
        squeue's stdout.

    Returns
    -------
    dict
        job id (str) -> (state, reason); lines of another shape are skipped.
    """
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[0]:
            out[parts[0]] = (parts[1].strip(), parts[2].strip())
    return out


def classify(state: str, reason: str) -> tuple:
    """What a job's ``squeue`` state and reason mean for a process waiting on its workers.

    Parameters
    ----------
    state, reason : str
        squeue's ``%T`` and ``%r`` of the job.

    Returns
    -------
    tuple
        ``(verdict, why, keys)``: verdict ``"running"`` (workers starting),
        ``"queued"`` (waits for resources, priority, a limit that can clear),
        ``"never"`` (SLURM will not start it as requested), ``"maybe"``
        (nodes unavailable: impossible only if the request fits no node, see
        :func:`check_fit`) or ``"ended"``; ``why`` in words; ``keys`` the
        profile keys to change (empty unless never/maybe).
    """
    if state in _RUNNING:
        return "running", "running", ()
    if state in _ENDED:
        return "ended", f"ended {state}" + (f" ({reason})" if reason and reason != "None" else ""), ()
    word = reason.split(",")[0].strip()
    if word in _NEVER:
        why, keys = _NEVER[word]
        return "never", why, keys
    if _PER_JOB.match(word):
        keys = next((k for s, k in _LIMIT_KEYS if s in word), ("cores", "memory", "walltime", "queue"))
        return "never", f"a per-job limit of the QOS or association ({word})", keys
    if word.startswith(_MAYBE):
        return "maybe", "the nodes it needs are down, drained or reserved", ("cores", "memory", "queue")
    return "queued", f"{state} ({reason})" if reason and reason != "None" else state, ()


def describe(states: dict) -> str:
    """``squeue`` states of jobs in one phrase, e.g. ``job 5 RUNNING, job 6 PENDING (Resources)``.

    Parameters
    ----------
    states : dict
        job id -> (state, reason), as :func:`parse_squeue` returns.
    """
    ids = sorted(states, key=lambda j: (len(j), j))
    words = [states[i][0] + (f" ({states[i][1]})" if states[i][1] and states[i][1] != "None" else "") for i in ids]
    if len(ids) <= 4:
        return ", ".join(f"job {i} {w}" for i, w in zip(ids, words))
    counts = {w: words.count(w) for w in dict.fromkeys(words)}
    return ", ".join(f"{n} jobs {w}" for w, n in counts.items())


# --- sbatch: submission failures ---------------------------------------------------------------------------------

# (phrase in sbatch's reason, lower case) -> profile keys; first match wins
_SBATCH_KEYS = (("account", ("account", "queue")), ("partition", ("queue",)), ("memory", ("memory",)),
                ("time limit", ("walltime",)), ("qos", ("job_extra_directives", "account")),
                ("feature", ("job_extra_directives",)), ("constraint", ("job_extra_directives",)),
                ("node configuration", ("cores", "memory", "job_extra_directives")), ("cpu", ("cores",)))
_ALL_KEYS = ("queue", "account", "cores", "memory", "walltime", "job_extra_directives")


def sbatch_failure(text: str) -> str:
    """A one-line DbfsError message for a failed worker-job submission.

    Parameters
    ----------
    text : str
        The error dask-jobqueue raised (its message holds sbatch's stderr
        after ``stderr:``), or sbatch's stderr itself.

    Returns
    -------
    str
        SLURM's reason quoted, and the profile keys to change.
    """
    err = text.split("stderr:", 1)[1] if "stderr:" in text else text
    said = [x.split("error:", 1)[1].strip() for x in err.splitlines() if "error:" in x]
    failed = [x.split("submission failed:", 1)[1].strip() for x in said if "submission failed:" in x]
    reason = failed[-1] if failed else (said[-1] if said else _last_line(err) or "no reason given")
    detail = [x for x in said if "submission failed:" not in x and x != reason]
    low = reason.lower() + " " + " ".join(detail).lower()
    keys = next((k for phrase, k in _SBATCH_KEYS if phrase in low), _ALL_KEYS)
    more = f" ({'; '.join(detail)})" if detail else ""
    return (f"sbatch refused the worker job: {reason}{more}: change {', '.join(keys)} in the profile "
            f"(`dbfs cluster PROFILE --check` shows what the partition offers)")


# --- sinfo: does a request fit a node of the partition ------------------------------------------------------------

class Node(NamedTuple):
    """One row of ``sinfo -N`` in :data:`SINFO_FORMAT`."""
    partition: str
    default: bool
    name: str
    cpus: int
    mem_mib: int
    state: str
    time_limit_s: float | None      # None: no limit
    avail: str
    max_cpus: int | None            # None: no per-node CPU limit in the partition


def _int(text: str) -> int | None:
    m = re.match(r"\s*(\d+)", text)
    return int(m.group(1)) if m else None


def parse_sinfo(text: str) -> list:
    """Nodes in ``sinfo -h -N -o "%P|%N|%c|%m|%t|%l|%a|%B"`` output (one row per node and partition).

    Parameters
    ----------
    text : str
        sinfo's stdout.

    Returns
    -------
    list of Node
    """
    nodes = []
    for line in text.splitlines():
        parts = [x.strip() for x in line.split("|")]
        if len(parts) != 8 or _int(parts[2]) is None:
            continue
        part, name, cpus, mem, state, limit, avail, max_cpus = parts
        nodes.append(Node(part.rstrip("*"), part.endswith("*"), name, _int(cpus), _int(mem) or 0, state,
                          slurm_seconds(limit), avail, _int(max_cpus)))
    return nodes


def request_mib(memory) -> int:
    """MiB that a job of ``memory`` books: dask-jobqueue's ``--mem`` (bytes rounded up to G, M or K).

    Parameters
    ----------
    memory : str or int
        The profile's ``memory`` (Dask units: ``4GB`` is 4e9 bytes).
    """
    n = parse_bytes(memory)
    if n >= 1024 ** 3:
        return math.ceil(n / 1024 ** 3) * 1024
    return max(1, math.ceil(n / 1024 ** 2))


class Fit(NamedTuple):
    """What :func:`check_fit` found: the partition, its largest node, problems ``(text, keys)``, notes."""
    partition: str | None
    nodes: int
    cpus: int
    mem_mib: int
    problems: list
    notes: list


def _partition_of(prof: dict, nodes: list) -> tuple:
    """(partition name or None, its nodes, problems)."""
    names = sorted({n.partition for n in nodes})
    part = prof.get("queue")
    if part is None:
        part = next((n.partition for n in nodes if n.default), None)
        if part is None:
            return None, [], [(f"SLURM has no default partition: set queue (partitions: {', '.join(names)})",
                               ("queue",))]
    mine = [n for n in nodes if n.partition == part]
    if not mine:
        return part, [], [(f"queue {part}: SLURM has no such partition (partitions: {', '.join(names) or 'none'})",
                           ("queue",))]
    return part, mine, []


def check_fit(prof: dict, nodes: list) -> Fit:
    """Whether a slurm profile's jobs fit the nodes of its partition (pure; see :func:`check_request`).

    Parameters
    ----------
    prof : dict
        A checked ``type: slurm`` profile (cores, memory, jobs, queue, walltime).
    nodes : list of Node
        As :func:`parse_sinfo` returns.

    Returns
    -------
    Fit
        Empty ``problems`` when one node holds a job's cores and memory, the
        walltime is within the partition's limit, the partition is up and
        all ``jobs`` fit the partition at once (dbfs waits for all of them).
    """
    part, mine, problems = _partition_of(prof, nodes)
    if not mine:
        return Fit(part, 0, 0, 0, problems, [])
    cores, mib, jobs = prof["cores"], request_mib(prof["memory"]), prof.get("jobs") or 1
    cap = [min(n.cpus, n.max_cpus or n.cpus) for n in mine]
    big_cpu, big_mem = max(cap), max(n.mem_mib for n in mine)
    fits = [(n, c) for n, c in zip(mine, cap) if c >= cores and n.mem_mib >= mib]
    if big_cpu < cores:
        problems.append((f"cores {cores} > {big_cpu} CPUs, the most a node of partition {part} gives a job",
                         ("cores", "processes")))
    if big_mem < mib:
        problems.append((f"memory {prof['memory']} (--mem {mib} MiB) > {big_mem} MiB, the largest node of "
                         f"partition {part}", ("memory",)))
    if not fits and big_cpu >= cores and big_mem >= mib:
        problems.append((f"no node of partition {part} has both {cores} CPUs and {mib} MiB", ("cores", "memory")))
    room = sum(min(c // cores, n.mem_mib // mib) for n, c in fits)
    if fits and room < jobs:
        problems.append((f"jobs {jobs}: partition {part} holds at most {room} such jobs at once and dbfs waits for "
                         f"all of them", ("jobs", "cores", "memory")))
    limit, want = mine[0].time_limit_s, slurm_seconds(prof.get("walltime"))
    if limit is not None and want is not None and want > limit:
        problems.append((f"walltime {prof['walltime']} > the time limit of partition {part} ({limit / 3600:g} h)",
                         ("walltime",)))
    if all(n.avail != "up" for n in mine):
        problems.append((f"partition {part} is {mine[0].avail}", ("queue",)))
    notes = []
    if fits and all(re.sub(r"\W", "", n.state) in _DOWN for n, _ in fits):
        notes.append(f"no node that fits is up now ({', '.join(sorted({n.state for n, _ in fits}))}): jobs wait")
    if prof.get("account"):
        notes.append("account is not checked (sinfo does not know accounts)")
    return Fit(part, len(mine), big_cpu, big_mem, problems, notes)


_DOWN = {"down", "drain", "drained", "drng", "draining", "fail", "failing", "maint", "unk", "unknown", "futr",
         "future", "inval", "noresp", "powered_down", "powering_down", "pow_dn"}


def sinfo_nodes() -> list:
    """The nodes ``sinfo`` lists (:func:`parse_sinfo`); a one-line DbfsError where it does not answer."""
    rc, out, err = _run(["sinfo", "-h", "-N", "-o", SINFO_FORMAT])
    if rc == 127:
        raise DbfsError("--check asks sinfo, which is not on PATH: run it where SLURM's commands work")
    if rc:
        raise DbfsError(f"sinfo failed ({_last_line(err) or f'exit {rc}'}): is the SLURM controller up?")
    return parse_sinfo(out)


def check_request(prof: dict, where: str, quiet: bool = False) -> Fit:
    """``dbfs cluster PROFILE --check``: ask ``sinfo`` whether ``prof`` fits, submitting nothing.

    Parameters
    ----------
    prof : dict
        A checked ``type: slurm`` profile.
    where : str
        The profile's name or file, for the messages.
    quiet : bool
        No status lines.

    Returns
    -------
    Fit
        When the request fits (after a status line saying so).

    Raises
    ------
    DbfsError
        One line listing what does not fit and the keys to change.
    """
    fit = check_fit(prof, sinfo_nodes())
    if fit.nodes:
        say(f"partition {fit.partition}: {fit.nodes} node(s), at most {fit.cpus} CPUs and {fit.mem_mib} MiB per "
            f"node; profile {where} asks {prof.get('jobs') or 1} job(s) of {prof['cores']} cores and "
            f"{request_mib(prof['memory'])} MiB", quiet)
    for note in fit.notes:
        say(note, quiet)
    if fit.problems:
        keys = list(dict.fromkeys(k for _, ks in fit.problems for k in ks))
        raise DbfsError(f"profile {where} does not fit: {'; '.join(t for t, _ in fit.problems)}: change "
                        f"{', '.join(keys)} in the profile")
    say(f"profile {where} fits partition {fit.partition} (nothing submitted)", quiet)
    return fit


# --- signals: every exit path unwinds through the code that cancels the jobs --------------------------------------

_GUARDED = (signal.SIGTERM, signal.SIGHUP)
_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_ACTIVE = [0]           # SLURM clusters up in this process
_SAVED: dict = {}       # signal -> its handler before the first cluster


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _on_signal(signum, frame):
    """SIGTERM/SIGHUP while SLURM jobs are up: unwind (``finally`` cancels the jobs), exit 128 + signum."""
    with contextlib.suppress(OSError, ValueError):      # SIGHUP: the terminal may be gone
        say(f"{signal.Signals(signum).name}: cancelling the SLURM jobs")
    raise SystemExit(128 + signum)


def guard_signals() -> bool:
    """Make SIGTERM and SIGHUP unwind the main thread while a SLURM cluster is up.

    Only a signal whose handler is the default is taken over (an ignored
    SIGHUP under ``nohup`` stays ignored; a Python handler the caller set
    stays in charge). Calls nest: the handlers go back with the last
    :func:`unguard_signals`.

    Returns
    -------
    bool
        False off the main thread, where handlers cannot be set (nothing done).
    """
    if not _main_thread():
        return False
    if _ACTIVE[0] == 0:
        for s in _GUARDED:
            _SAVED[s] = signal.getsignal(s)
            if _SAVED[s] is signal.SIG_DFL:
                signal.signal(s, _on_signal)
    _ACTIVE[0] += 1
    return True


def unguard_signals() -> None:
    """Undo one :func:`guard_signals`; the last one restores the handlers it replaced."""
    if not _main_thread() or _ACTIVE[0] == 0:
        return
    _ACTIVE[0] -= 1
    if _ACTIVE[0] == 0:
        for s, h in _SAVED.items():
            if signal.getsignal(s) is _on_signal:
                signal.signal(s, h)
        _SAVED.clear()


@contextlib.contextmanager
def held_signals():
    """SIGINT/SIGTERM/SIGHUP noted, not acted on, inside; yields the list of those that came.

    The caller delivers them (``signal.raise_signal``) once it restored the
    handlers it wants them to meet.
    """
    pending, saved = [], {}
    if _main_thread():
        for s in _HELD:
            h = signal.getsignal(s)
            if h is not None and h is not signal.SIG_IGN:
                saved[s] = h
                signal.signal(s, lambda n, f: pending.append(n))
    try:
        yield pending
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return os.environ.get("USER", "")


def scancel(ids, name: str, quiet: bool = False) -> None:
    """Cancel a process's jobs by name (this user's) and by id; jobs already gone are no error.

    Parameters
    ----------
    ids : iterable of str
        Job ids known to have been submitted.
    name : str
        The jobs' name (:func:`job_name`).
    quiet : bool
        No warning line when scancel fails for known ids.
    """
    rc, _, err = _run(["scancel", f"--name={name}", f"--user={_user()}"])
    if ids:
        rc2, _, _ = _run(["scancel", *sorted(ids, key=lambda j: (len(j), j))])
        if rc and rc2:
            with contextlib.suppress(OSError, ValueError):
                say(f"warning: scancel failed ({_last_line(err) or f'exit {rc}'}): cancel SLURM jobs "
                    f"{', '.join(sorted(ids, key=lambda j: (len(j), j)))} yourself", quiet)


def squeue_states(ids) -> dict | None:
    """``squeue``'s (state, reason) of job ``ids``, finished ones included while SLURM remembers them.

    Parameters
    ----------
    ids : list of str

    Returns
    -------
    dict or None
        As :func:`parse_squeue`; a job SLURM no longer knows is absent.
        None when squeue does not answer.
    """
    if not ids:
        return {}
    rc, out, err = _run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", SQUEUE_FORMAT])
    if rc and "Invalid job id" not in err:
        return None
    return parse_squeue(out)
