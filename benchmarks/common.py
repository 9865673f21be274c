"""Shared bits for benchmark scripts: JSON records and repeat timing."""
from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from dbfs.report import machine

RESULTS = Path(__file__).resolve().parent / "results"


def write_record(kind: str, record: dict, out_dir=None) -> Path:
    """Write ``record`` (plus machine and time) to results/<kind>-<UTC stamp>.json."""
    out = Path(out_dir or os.environ.get("DBFS_RESULTS") or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = out / f"{kind}-{stamp}.json"
    record = {"benchmark": kind, "when": stamp, "machine": machine(), **record}
    path.write_text(json.dumps(record, indent=1, default=float))
    print(f"record: {path}", file=sys.stderr)
    return path


def median_time(fn, repeat=3):
    """(median seconds, all seconds) of ``repeat`` calls of fn()."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], times
