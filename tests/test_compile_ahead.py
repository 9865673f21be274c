"""Kernels compiled ahead (dbfs.backends.ahead): a second process compiles the CPU searches' kernels with
the types the run's graph will have, so the run loads them from Numba's cache instead of compiling them.

The job's types are checked against a graph the CPU backend really loads (relabelled or not, two id
widths' worth of SCALEs cannot both run here: the width is the one function of N, checked directly); the
slow test starts from an empty NUMBA_CACHE_DIR, runs the child as the pipeline does, then asks a fresh
process that warms the searches as the backend does whether any kernel missed the cache."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dbfs.backends import RunConfig
from dbfs.backends.ahead import cpu_search_job
from dbfs.backends.cpu import CpuBackend
from dbfs.graph import id_dtype
from dbfs.spec import GraphSpec


@pytest.mark.parametrize("relabel", ["none", "degree"])
def test_job_types_are_the_loaded_graphs(tmp_path, relabel):
    """The CPU backend's job names the dtypes of the CSR and edges it then loads (writeable arrays)."""
    from dbfs.pipeline import open_backend

    spec = GraphSpec.make("kronecker", 10)
    cfg = RunConfig(n_roots=2, quiet=True, relabel=relabel)
    job = CpuBackend.ahead_job(cfg, spec)
    b, ds, _, _ = open_backend(spec, tmp_path, cfg)
    try:
        g = b.graph
        assert job == {"warm": "cpu-search", "indptr": g.indptr.dtype.str, "indices": g.indices.dtype.str,
                       "edges": b.edges.dtype.str}
        assert g.indptr.flags.writeable and g.indices.flags.writeable
    finally:
        b.close()
    assert np.dtype(cpu_search_job(GraphSpec.make("kronecker", 33))["indices"]) == id_dtype(1 << 33)


def test_nothing_ahead_where_the_types_are_unknown():
    """A stored dataset's name, or a simulated device/host split (other kernels): no job."""
    assert CpuBackend.ahead_job(RunConfig(), "kron-s10-ef16-s2-3") is None
    assert CpuBackend.ahead_job(RunConfig(device_memory_limit=1 << 20), GraphSpec.make("kronecker", 10)) is None


_CHECK = r"""
import json, sys
import numpy as np
from numba.core.registry import CPUDispatcher
import dbfs.backends.cpu as cpu
job = json.loads(sys.argv[1])
cpu.warm_search_side(np.zeros(2, job["indptr"]), np.zeros(1, job["indices"]), np.dtype(job["edges"]))
mods = [m for n, m in sorted(sys.modules.items()) if n.startswith(("dbfs.bfs.cpu.", "dbfs.validate", "dbfs.roots"))]
hits = misses = 0
missed = []
for m in mods:
    for k, v in vars(m).items():
        if isinstance(v, CPUDispatcher) and v.signatures:
            hits += sum(v.stats.cache_hits.values())
            n = sum(v.stats.cache_misses.values())
            misses += n
            if n:
                missed.append(f"{m.__name__}.{k}")
print(json.dumps({"hits": hits, "misses": misses, "missed": sorted(set(missed))}))
"""


@pytest.mark.slow
def test_the_child_leaves_every_search_kernel_cached(tmp_path):
    """From an empty Numba cache: after the compile-ahead child, a process warming the searches and
    validation with the job's types loads every kernel from the cache (no miss: nothing compiled)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    job = json.dumps(cpu_search_job(GraphSpec.make("kronecker", 16)))
    subprocess.run([sys.executable, "-m", "dbfs.backends.ahead", job], env=env, check=True, timeout=600)
    out = subprocess.run([sys.executable, "-c", _CHECK, job], env=env, capture_output=True, text=True,
                         check=True, timeout=600)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["misses"] == 0 and got["hits"] > 20, got
