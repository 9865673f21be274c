"""Shared bits for benchmark scripts: machine description and JSON records."""
from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    import numpy

    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    versions = {"python": sys.version.split()[0], "numpy": numpy.__version__}
    for mod in ("numba", "dask", "distributed", "zarr", "scipy", "cupy", "igraph", "graphblas", "networkx"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - optional peers
            pass
    import dbfs

    versions["dbfs"] = dbfs.__version__
    return {"host": socket.gethostname(), "platform": platform.platform(), "cpu": cpu,
            "cores": len(os.sched_getaffinity(0)), "memory_bytes": mem, "versions": versions}


def write_record(kind: str, record: dict, out_dir=None) -> Path:
    out = Path(out_dir or os.environ.get("DBFS_RESULTS") or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"{kind}-{stamp}.json"
    record = {"benchmark": kind, "when": stamp, "machine": machine(), **record}
    path.write_text(json.dumps(record, indent=1, default=float))
    print(f"record: {path}", file=sys.stderr)
    return path


def median_time(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], times
