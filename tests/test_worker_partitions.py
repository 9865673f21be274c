"""Many partitions on one CPU worker: a level is one pass over all of them, not one per partition.

A worker's level loop (:func:`dbfs.bfs.dask.search.bsp._bsp_levels`) over its
partitions must cost the same Numba kernel calls whether it holds 1 or 16
partitions (a Python loop launching kernels per partition, or per pair of
partitions, serialised a top-down level of hubs), and find the same levels:
directions, frontier sizes, edge and discovery counts equal to the
single-process ``do``, parents that validate.

The level loop runs here in this process, as its task runs on a worker, on
real partitions (Kernel 1 variants stored as zarr, read and prepared by the
worker's own functions) with the loop's one-worker mesh; the kernel calls
are counted by wrapping, for the searches only, every Numba dispatcher the
search modules hold (each wrapper calls the real kernel). A real
LocalCluster of one worker holding 16 partitions runs the same searches
end to end.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from dbfs import kernel1
from dbfs.bfs import bfs
from dbfs.validate import validate

KEY = ("direction", "frontier", "edges", "discovered")


@pytest.fixture(scope="module")
def kron13(tmp_path_factory):
    from conftest import kron_with_roots

    return kron_with_roots(tmp_path_factory.mktemp("wp"), 13, 5, 4)


def _parts(ds, P, kind):
    """Partitions ``0..P-1`` of the ``kind`` variant as a worker loads and prepares them."""
    from dbfs.bfs.dask.layout.worker import _global_degrees, _load_part, _local_degrees, _prepare_part
    from dbfs.partition import Partitioning

    kernel1.build_partitioned(ds.path, P=P, partitioning=kind, client=None, progress=False)
    variant = kernel1.variant_name(P, kind)
    parts = [_load_part(ds.path, variant, rk) for rk in range(P)]
    deg = _global_degrees(Partitioning(ds.n_vertices, P, kind), *[_local_degrees(p) for p in parts])
    return [_prepare_part(p, deg) for p in parts]


class _NoWorker:
    address = "tcp://127.0.0.1:1"
    handlers: dict = {}


class _Counted:
    """While entered: every Numba dispatcher held by a search module is replaced by a wrapper that
    counts its calls (kernels called from compiled code are not calls from Python: not counted)."""

    PREFIXES = ("dbfs.bfs.cpu", "dbfs.bfs.dask", "dbfs.partition")

    def __init__(self):
        self.n = 0
        self._saved = []

    def __enter__(self):
        from numba.core.registry import CPUDispatcher

        for name, m in list(sys.modules.items()):
            if m is None or not name.startswith(self.PREFIXES):
                continue
            for k, v in list(vars(m).items()):
                if isinstance(v, CPUDispatcher):
                    self._saved.append((m, k, v))
                    setattr(m, k, self._wrap(v))
        return self

    def _wrap(self, f):
        def call(*args, **kw):
            self.n += 1
            return f(*args, **kw)

        return call

    def __exit__(self, *exc):
        for m, k, v in self._saved:
            setattr(m, k, v)
        self._saved.clear()


def _search(parts, root, algorithm, nnz, counter=None):
    """One search on one worker holding ``parts``: (level records, kernel calls per level, parents by rank)."""
    from dbfs.bfs.dask.search.bsp import _bsp_levels
    from dbfs.bfs.dask.mesh.plugin import MeshPlugin
    from dbfs.bfs.dask.mesh.transport import _LocalMesh

    plugin = MeshPlugin()
    plugin.setup(_NoWorker())
    ends = []
    if counter is not None:
        plugin.level_listeners.append(lambda lv, ranks, rec: ends.append(counter.n))
        start = counter.n
    P = len(parts)
    out = _bsp_levels(_LocalMesh(), 0, [list(range(P))], parts, root, algorithm, {"policy": "beamer"}, nnz, plugin)
    calls = list(np.diff([start] + ends)) if counter is not None else None
    return out["records"], calls, out["parents"]


def _global_parent(ds, parents, P, kind):
    from dbfs.partition import Partitioning

    part = Partitioning(ds.n_vertices, P, kind)
    g = np.full(ds.n_vertices, -2, np.int64)
    for rk, sl in parents.items():
        rg = part.vertex_range(rk)
        g[rg.start:rg.stop:rg.step] = sl[:len(rg)]
    assert (g != -2).all()
    return g


@pytest.mark.parametrize("kind", ["block", "cyclic"])
def test_level_kernel_calls_do_not_grow_with_partitions(kron13, kind):
    """1 and 16 partitions on one worker: per level the same kernel calls (do, td, bu searches), the same
    records as the single-process do, valid parents."""
    ds, edges, csr, roots = kron13
    held = {P: _parts(ds, P, kind) for P in (1, 16)}
    nnz = int(csr.indptr[-1])
    for P, parts in held.items():                  # load every kernel first: compiled code is not counted
        for algorithm in ("do", "td", "bu"):
            _search(parts, roots[0], algorithm, nnz)
    for root in roots:
        ref = bfs(csr, root, algorithm="do", stats=True)
        for algorithm in ("do", "td", "bu"):
            got = {}
            for P, parts in held.items():
                with _Counted() as c:
                    rec, calls, parents = _search(parts, root, algorithm, nnz, c)
                v = validate(edges, root, _global_parent(ds, parents, P, kind))
                assert v.ok, f"P={P} {algorithm} root {root}: {v.summary()}"
                got[P] = ([tuple(r[k] for k in KEY) for r in rec], calls)
                assert min(calls) >= 1
            assert got[16] == got[1], f"{algorithm} root {root}: per level (records, kernel calls) differ"
            if algorithm == "do":
                assert got[1][0] == [tuple(r[k] for k in KEY) for r in ref.level_stats]


@pytest.mark.distributed
def test_one_worker_of_sixteen_partitions_on_a_cluster(kron13):
    """A real LocalCluster, one worker x 2 threads holding 16 partitions: every search validates and its
    levels are the single-process do's."""
    import dbfs.bfs.dask as D
    from dbfs.cluster import client_for

    ds, edges, csr, roots = kron13
    kernel1.build_partitioned(ds.path, P=16, client=None, progress=False)
    with client_for(n_workers=1, threads_per_worker=2, quiet=True) as client:
        with D.load_distributed(client, ds.path, kernel1.variant_name(16)) as dg:
            assert len(set(dg.rank_worker.values())) == 1
            for root in roots:
                res, _, rec = D.search(dg, root)
                v = validate(edges, root, D.gather_parent(res))
                assert v.ok, v.summary()
                ref = bfs(csr, root, algorithm="do", stats=True)
                assert [tuple(r[k] for k in KEY) for r in rec] == [tuple(r[k] for k in KEY) for r in ref.level_stats]


def _set_env(key, value):
    import os

    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


@pytest.mark.distributed
def test_search_profile_diagnostic_writes_each_workers_profile(kron13, tmp_path):
    """``DBFS_PROFILE_SEARCH`` (a folder) on the workers: each worker's batch of searches leaves a cProfile
    file there whose stats include the level loop; unset, no file."""
    import pstats

    import dbfs.bfs.dask as D
    from dbfs.bfs.dask.search.profiled import PROFILE_ENV
    from dbfs.cluster import client_for

    ds, edges, csr, roots = kron13
    kernel1.build_partitioned(ds.path, P=2, client=None, progress=False)
    folder = tmp_path / "prof"
    with client_for(n_workers=2, threads_per_worker=1, quiet=True) as client:
        with D.load_distributed(client, ds.path, kernel1.variant_name(2)) as dg:
            D.search(dg, roots[0])
            assert not folder.exists()
            client.run(_set_env, PROFILE_ENV, str(folder))
            try:
                res, _, _ = D.search(dg, roots[0])
                assert validate(edges, roots[0], D.gather_parent(res)).ok
            finally:
                client.run(_set_env, PROFILE_ENV, None)
    files = sorted(folder.glob("search-w*.prof"))
    assert {f.name.split("-")[1] for f in files} == {"w0", "w1"}
    for f in files:
        assert any(fn == "_bsp_levels" for (_, _, fn) in pstats.Stats(str(f)).stats)
