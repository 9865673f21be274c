"""Shared fixtures: the Graph500 3.0.1 reference vectors (tests/golden)."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
from _require_gpu import pytest_runtest_makereport  # noqa: F401  (DBFS_REQUIRE_GPU=1: see the module)

_HERE = Path(__file__).resolve().parent
# a copy of ../shared/testdata/graph500 (Graph500 3.0.1 reference vectors, 270 kB) lives in tests/golden
GOLDEN = Path(os.environ.get("DBFS_GOLDEN", _HERE / "golden"))


def _load_json(name):
    with open(GOLDEN / name) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def golden10():
    """SCALE 10 reference: dict from the JSON plus 'edges' (int64 (M, 2))."""
    d = _load_json("kron_s10_ef16_seed2_3.json")
    d["edges"] = np.load(GOLDEN / "kron_s10_ef16_seed2_3_edges.npy")
    return d


@pytest.fixture(scope="session")
def golden16():
    """SCALE 16 reference JSON (sha256, first/last tuples, roots, nedge_v3)."""
    return _load_json("kron_s16_ef16_seed2_3.json")


@pytest.fixture(scope="session")
def golden_stdout():
    return (GOLDEN / "reference-3.0.1-scale16-stdout.txt").read_text()


@pytest.fixture(scope="module")
def client():
    """A real LocalCluster of 2 worker processes x 1 thread, one per test module (a module may define its own)."""
    from dbfs.cluster import client_for

    with client_for(n_workers=2, threads_per_worker=1, quiet=True) as c:
        yield c


@pytest.fixture(scope="session")
def cp():
    """CuPy, or a skip without cupy or a CUDA device (for tests marked gpu)."""
    cupy = pytest.importorskip("cupy")
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no driver / no device: cupy raises its own CUDA errors
        n = 0
    if n < 1:
        pytest.skip("no CUDA device")
    return cupy


def _invoke_cli(*args, ok=True):
    """`dbfs ARGS` through click's runner; asserts exit 0 unless ok=False."""
    from click.testing import CliRunner

    from dbfs.cli import cli

    res = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert res.exit_code == 0, res.output + res.stderr
    return res


@pytest.fixture
def dbfs_cli():
    """The CLI runner: ``dbfs_cli("run", "--scale", 10, ok=False)`` -> click Result."""
    return _invoke_cli


def kron_with_roots(root_dir, scale: int, seed: int, k: int):
    """A stored Kronecker graph (edgefactor 16), its edges (int64), its CSR and ``k`` random roots with edges plus
    the top hub (a first top-down level over the hubs' rows): what the worker-level tests search."""
    import numpy as np

    from dbfs import kernel1, store
    from dbfs.spec import GraphSpec

    ds, _ = store.generate(GraphSpec.make("kronecker", scale, 16, 2, 3), root=root_dir, client=None, quiet=True)
    edges = np.asarray(ds.edges()[:], np.int64)
    csr = kernel1.build_csr(edges, ds.n_vertices)
    deg = np.diff(csr.indptr)
    roots = np.random.default_rng(seed).choice(np.flatnonzero(deg > 0), size=k, replace=False).tolist()
    roots.append(int(np.argmax(deg)))
    return ds, edges, csr, roots
