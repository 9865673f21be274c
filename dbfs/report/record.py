"""The JSON result file of a run: one record, written atomically.

Contract
--------
:func:`write_json` writes :func:`result_dict` of a run (``res``: the
pipeline's result object) and its Graph500 fields to ``path`` as indented
JSON, via a temporary file and ``os.replace`` so a reader never sees half a
file. Output is an API: these keys are produced here and nowhere else.

While the run goes, :func:`write_partial` keeps the same file up to date
with ``"complete": false`` and what is known (``dataset``, ``scale``,
``config``, ``construction_time``, ``load_time``, ``stages`` so far and
the ``searches`` validated so far, without their ``levels``): a run cut
off by a job's time limit still leaves its measurements.

Encoding (the record's keys): ``complete`` (true once the run ended), ``dbfs_version``, ``machine`` (host, CPU,
cores, memory, package versions: :func:`machine`), ``spec`` (the dataset's
generation spec), ``dataset``, ``n_vertices``, ``n_edges``, ``config``
(algorithm, backend, CSR variant, ``relabel`` (none or degree),
``relabel_default`` (true when ``--relabel`` was not given and the
backend's default chose it), ``relabel_why``, options, partitions, ``edges``
(the input list ``stored`` or ``virtual``: regenerated where it is read)),
``graph500`` (every key of the Graph500 text output, as numbers),
``validated``,
``generation_time``, ``construction_time``, ``load_time``,
``compile_time`` (seconds this run spent loading Numba kernels before the
timed stages, in none of the times before it: compiling them on a first
run, reading Numba's cache after), ``stages`` (wall seconds of each stage
in this run: generate, kernel1, load, compile, warm-up, searches,
validation), ``timer`` (what the search clock includes on this
backend), ``energy``, ``failures``, and
``searches``: one record per root with ``root``, ``time`` (s), ``nedge``,
``teps``, ``validate_time`` (s or null), ``valid`` (bool or null) and
``levels`` (the per-level records of the search: level, direction, frontier,
edges examined, time; on the dask backend also ``workers``, per mesh worker
its ``kernel`` and ``exchange`` seconds and the ``sent_bytes`` of the level:
:func:`slowest_levels` picks the slowest). NumPy scalars and arrays become JSON numbers and
lists; anything else unknown becomes its ``str``.

Reading a record: :func:`slowest_levels` picks the ``n`` levels with the
longest ``time`` across every search of a run (ties: the earlier search and
level first) among those carrying a per-worker breakdown (``workers``),
slowest first; :func:`slowest_levels_of_record` does the same from a
record read back from its file. A worker entry without ``sent_bytes`` (a
record written before they were counted) counts 0 bytes; a run whose levels
carry no breakdown (the single-process backends) gives an empty list, so
its HTML report (:mod:`dbfs.monitor.report_html`) has no such section. Each
returned level is ``search`` (1-based), ``root``, ``level``, ``direction``,
``frontier``, ``time`` and ``workers`` (``worker``, ``kind``, ``kernel``,
``exchange``, ``sent_bytes``; ``kind`` "?" and numbers 0 where absent). A
level of the bulk-synchronous search ends when its slowest worker does; a
worker's kernel seconds against its exchange seconds tell a slow kernel
(load imbalance) from a slow exchange (bytes on the wire, or waiting for a
peer): the per-level table of S. Beamer, K. Asanovic, D. Patterson,
"Direction-Optimizing Breadth-First Search", SC 2012, per worker.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import sys
from pathlib import Path

import numpy as np

__all__ = ["machine", "result_dict", "search_records", "write_json", "write_partial", "slowest_levels",
           "slowest_levels_of_record", "TOP"]


def _dbfs_version() -> str:
    """dbfs's version, as :func:`machine` reports it (without reading the host's description; the package is
    imported before any of its modules)."""
    return getattr(sys.modules["dbfs"], "__version__", "?")


def machine() -> dict:
    """Where a result was measured.

    Returns
    -------
    dict
        ``host``, ``platform``, ``cpu`` (model name or ``"?"``), ``cores``
        (usable by this process), ``memory_bytes`` (or None) and ``versions``
        (python and the imported or importable packages dbfs cares about).
    """
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = None
    versions = {"python": sys.version.split()[0]}
    for mod in ("dbfs", "numpy", "numba", "dask", "distributed", "zarr", "scipy", "cupy", "igraph", "graphblas", "networkx"):
        m = sys.modules.get(mod)
        if m is None and mod in ("dbfs", "numpy", "numba", "dask", "distributed", "zarr"):
            try:
                m = __import__(mod)
            except ImportError:
                m = None
        if m is not None:
            versions[mod] = getattr(m, "__version__", "?")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"host": socket.gethostname(), "platform": platform.platform(), "cpu": cpu, "cores": cores,
            "memory_bytes": mem, "versions": versions}


def search_records(roots, times, nedges, validate_times=None, valid=None, levels=None) -> list:
    """The ``searches`` of a record: one per search counted so far (``len(nedges)``; a run's record as it goes
    has fewer than its roots) with ``root``, ``time``, ``nedge``, ``teps``, ``validate_time`` and ``valid`` (None
    when not validated: ``validate_times``/``valid`` None or empty), and ``levels`` when given."""
    out = []
    for i, n in enumerate(nedges):
        t = times[i]
        rec = {"root": int(roots[i]), "time": t, "nedge": n, "teps": n / t if t > 0 else None,
               "validate_time": validate_times[i] if validate_times else None,
               "valid": valid[i] if valid else None}
        if levels is not None:
            rec["levels"] = levels[i]
        out.append(rec)
    return out


def result_dict(res, graph500: dict) -> dict:
    """The JSON record of one run (keys in the module docstring).

    Parameters
    ----------
    res : object
        The run's result (``roots``, ``times``, ``nedges``, ``valid``,
        ``validate_times``, ``levels``, ``config``, ... as the pipeline fills them).
    graph500 : dict
        Graph500 output key -> number.

    Returns
    -------
    dict
    """
    searches = search_records(res.roots, res.times, res.nedges, res.validate_times if res.validated else None,
                              res.valid if res.validated else None, res.levels)
    where = machine()
    return {"complete": True, "dbfs_version": where["versions"].get("dbfs"), "machine": where,
            "spec": res.spec,
            "dataset": res.dataset, "n_vertices": res.n_vertices, "n_edges": res.n_edges,
            "config": res.config, "graph500": graph500, "validated": res.validated,
            "generation_time": res.generation_time, "construction_time": res.construction_time,
            "load_time": res.load_time, "compile_time": getattr(res, "compile_time", 0.0),
            "stages": dict(getattr(res, "stages", None) or {}),
            "timer": ("device synchronised before each clock read; the search's buffers made and the parents "
                      "-1 filled before it; parents stay on the device (copied to host memory after the timer, "
                      "when asked)"
                      if res.config.get("backend") == "gpu" else
                      "host clock around one backend call; parents written in host memory inside the timer"),
            "energy": res.energy, "failures": res.failures, "searches": searches}


def write_partial(path, doc: dict) -> Path:
    """Write a run's record as it goes (``"complete": false`` and what is known so far: ``doc``) to ``path``
    atomically; the finished run's :func:`write_json` replaces it. A run cut off (a job's time limit) leaves
    its stages, Kernel 1 and every search validated so far."""
    return _atomic(path, {"complete": False, "dbfs_version": _dbfs_version(), **doc})


def _atomic(path, doc: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=_jsonable))
    os.replace(tmp, path)
    return path


def write_json(path, res, graph500: dict) -> Path:
    """Write :func:`result_dict` of ``res`` to ``path`` atomically.

    Parameters
    ----------
    path : path-like
        The JSON file; its directory is created.
    res : object
        The run's result, as for :func:`result_dict`.
    graph500 : dict
        Graph500 output key -> number.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    return _atomic(path, result_dict(res, graph500))


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


#: levels a report shows
TOP = 5


def _worker(w: dict) -> dict:
    return {"worker": int(w.get("worker", 0)), "kind": str(w.get("kind", "?")),
            "kernel": float(w.get("kernel") or 0.0), "exchange": float(w.get("exchange") or 0.0),
            "sent_bytes": int(w.get("sent_bytes") or 0)}


def slowest_levels(roots, levels, n: int = TOP) -> list:
    """The ``n`` slowest levels with a per-worker breakdown (module docstring), slowest first.

    Parameters
    ----------
    roots : sequence of int
        The run's search keys, one per search.
    levels : sequence of list of dict
        Per search, its level records (None or [] for a search without them).
    n : int
        How many levels at most.

    Returns
    -------
    list of dict
    """
    found = []
    for i, (root, lv) in enumerate(zip(roots, levels)):
        for d in lv or ():
            ws = d.get("workers") if isinstance(d, dict) else None
            if not ws:
                continue
            found.append({"search": i + 1, "root": int(root), "level": int(d.get("level", 0)),
                          "direction": str(d.get("direction", "")), "frontier": int(d.get("frontier", 0)),
                          "time": float(d.get("time") or 0.0), "workers": [_worker(w) for w in ws]})
    found.sort(key=lambda x: (-x["time"], x["search"], x["level"]))
    return found[:max(0, int(n))]


def slowest_levels_of_record(record: dict, n: int = TOP) -> list:
    """:func:`slowest_levels` of a run's JSON record (``searches[i].root`` and ``.levels``)."""
    s = record.get("searches") or []
    return slowest_levels([x.get("root", -1) for x in s], [x.get("levels") for x in s], n)
