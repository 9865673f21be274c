"""dbfs.workers_info: the scheduler's workers as it has them, never the client's cached copy."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dbfs.workers_info import scheduler_identity, workers_info

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[1]


def test_live_workers_read_as_live_under_the_clients_own_refresh():
    """With the client refreshing its cached identity every millisecond (a loaded machine's timing, made
    common): every read of 2 live workers gives both (Client.scheduler_info(n_workers=-1) returned an
    empty worker table in about a third of such reads, which failed a CI run with "no workers")."""
    import dask

    from dbfs.cluster import client_for

    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        with client_for(n_workers=2, threads_per_worker=1, quiet=True) as c:
            c.wait_for_workers(2, timeout=60)
            want = set(c.nthreads())
            assert len(want) == 2
            for _ in range(300):
                assert set(workers_info(c)) == want
            ident = scheduler_identity(c)
            assert ident["n_workers"] == 2 and set(ident["workers"]) == want
            assert all(w["nthreads"] == 1 for w in workers_info(c).values())


def test_no_caller_reads_the_clients_cached_identity():
    """Every reader of the cluster's workers in the package, the tests and the benchmarks goes through
    dbfs.workers_info (the one module that names Client.scheduler_info, to say why not)."""
    pat = re.compile(r"\.scheduler_info\(")
    hits = [f"{p.relative_to(ROOT)}:{i}" for top in ("dbfs", "tests", "benchmarks")
            for p in sorted((ROOT / top).rglob("*.py")) if p.name not in ("test_workers_info.py", "workers_info.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if pat.search(line)]
    assert not hits, hits
