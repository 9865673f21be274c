"""Run reports: the JSON result file and the PNG plots.

JSON (``write_json``): ``dbfs_version``, ``machine`` (host, CPU, cores, memory,
package versions), ``spec`` (the dataset's generation spec), ``dataset``,
``config`` (algorithm, backend, CSR variant, options, partitions),
``graph500`` (every key of the Graph500 text output, as numbers), ``validated``,
``generation_time``, ``construction_time``, ``load_time``, and ``searches``:
one record per root with ``root``, ``time`` (s), ``nedge``, ``teps``,
``validate_time`` (s or null), ``valid`` (bool or null) and ``levels`` (the
per-level records of the search: level, direction, frontier, edges examined,
time).

Plot (``plot_run``): per-level frontier size and edges examined of top-down,
bottom-up and the run's algorithm on the first root (like the per-level
table of the hybrid-BFS papers), and the distribution of TEPS over roots.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import sys
from pathlib import Path

import numpy as np


def machine() -> dict:
    """Where a result was measured: host, CPU model, cores, memory, versions."""
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


def result_dict(res, graph500: dict) -> dict:
    searches = []
    for i, r in enumerate(res.roots):
        searches.append({
            "root": int(r), "time": res.times[i], "nedge": res.nedges[i],
            "teps": res.nedges[i] / res.times[i] if res.times[i] > 0 else None,
            "validate_time": res.validate_times[i] if res.validated else None,
            "valid": res.valid[i] if res.validated else None,
            "levels": res.levels[i],
        })
    return {"dbfs_version": machine()["versions"].get("dbfs"), "machine": machine(), "spec": res.spec,
            "dataset": res.dataset, "n_vertices": res.n_vertices, "n_edges": res.n_edges,
            "config": res.config, "graph500": graph500, "validated": res.validated,
            "generation_time": res.generation_time, "construction_time": res.construction_time,
            "load_time": res.load_time,
            "timer": ("device synchronised before each clock read; parents copied to host memory AFTER the timer"
                      if res.config.get("backend") == "gpu" else
                      "host clock around one backend call; parents written in host memory inside the timer"),
            "energy": res.energy, "failures": res.failures, "searches": searches}


def write_json(path, res, graph500: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result_dict(res, graph500), indent=1, default=_jsonable))
    os.replace(tmp, path)
    return path


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def plot_run(path, res, per_level: dict[str, list]) -> Path:
    """per_level: algorithm name -> list of level dicts for the same root."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax_f, ax_e, ax_t = axes
    for name, levels in per_level.items():
        if not levels:
            continue
        lv = [d["level"] for d in levels]
        ax_f.semilogy(lv, [max(d["frontier"], 1) for d in levels], marker="o", label=name)
        ax_e.semilogy(lv, [max(d["edges"], 1) for d in levels], marker="o", label=name)
        for d in levels:
            if d.get("direction") == "bu":
                ax_e.annotate("bu", (d["level"], max(d["edges"], 1)), fontsize=7)
    root = res.roots[0]
    ax_f.set(title=f"frontier per level (root {root})", xlabel="level", ylabel="vertices")
    ax_e.set(title="edges examined per level", xlabel="level", ylabel="adjacency entries")
    ax_f.legend()
    ax_e.legend()
    teps = np.array(res.nedges) / np.array(res.times)
    ax_t.hist(teps / 1e9, bins=min(20, max(5, len(teps) // 3)))
    hm = len(teps) / np.sum(1.0 / teps)
    ax_t.axvline(hm / 1e9, color="k", linestyle="--", label=f"harmonic mean {hm / 1e9:.3f}")
    ax_t.set(title=f"TEPS over {len(teps)} roots ({res.config['algorithm']}, {res.config['backend']})",
             xlabel="GTEPS", ylabel="searches")
    ax_t.legend()
    fig.suptitle(f"{res.dataset}: {res.n_vertices:,} vertices, {res.n_edges:,} edge tuples")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
