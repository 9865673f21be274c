"""The GPU backend's device/host split of the adjacency, simulated in host memory by the CPU backend
(issue #20: "a search over a split placement equals the unsplit one on invariants", on the CI machine).

Invariants: a ``td``/``bu``/``do`` search of a CSR whose adjacency is held as two pieces
(:func:`dbfs.bfs.cpu.split_graph`, bfs.cu's ``ADJ_PARAMS``) equals the search of the same CSR in one
array level for level (direction, frontier, edges examined, discovered) and in the BFS level of every
vertex, and its parents validate; for every budget (all host, a few rows, half, everything) and both
orders, relabelled or not. `dbfs run --backend cpu --device-memory-limit` searches the split, says it is
simulated and reports the placement in its JSON; what cannot read a split is refused in one line.
"""
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbfs.bfs import bfs, prepare
from dbfs.bfs.cpu import SPLIT_ALGORITHMS, SplitAdjacency, split_graph
from dbfs.bfs.cpu.adjacency import adj_at, joined
from dbfs.errors import DbfsError
from dbfs.generate.graph500 import kronecker_edges
from dbfs.kernel1 import build_csr
from dbfs.roots import graph500_roots
from dbfs.split import plan_split
from dbfs.validate import validate

ORDERS = ["prefix", "suffix"]
RUNS = [("td", {}), ("bu", {}), ("do", {}), ("do", {"policy": "change_state"})]


def _levels(res):
    return [(d["level"], d["direction"], d["frontier"], d["edges"], d["discovered"]) for d in res.level_stats]


def _budgets(g, order):
    """Device entries: none (all host), the first non-empty row at the device end (and a few past it),
    half, everything."""
    rows = np.flatnonzero(np.diff(g.indptr))
    first = int(g.indptr[rows[0] + 1]) if order == "prefix" else g.nnz - int(g.indptr[rows[-1]])
    return {"host": 0, "tiny": first + 3, "half": g.nnz // 2, "all": g.nnz}


@pytest.fixture(scope="module", params=[10, 14], ids=["s10", "s14"])
def kron(request):
    scale = request.param
    edges = kronecker_edges(scale)
    return scale, edges, graph500_roots(edges, scale, n=4).tolist()


@pytest.mark.parametrize("relabel", ["none", "degree"])
def test_split_search_equals_unsplit(kron, relabel):
    scale, edges, roots = kron
    n = 1 << scale
    g = prepare(build_csr(edges, n_vertices=n, relabel=relabel))
    want = {(a, tuple(o.items()), r): bfs(g, r, a, stats=True, levels=True, **o) for a, o in RUNS for r in roots}
    assert all((res.levels >= 0).sum() > n // 3 and len(res.level_stats) > 2 for res in want.values())
    for order in ORDERS:
        for name, cap in _budgets(g, order).items():
            sp = plan_split(g.indptr, cap, order, g.indices.dtype.itemsize)
            sg = prepare(split_graph(g, sp))
            ix = sg.indices
            assert isinstance(ix, SplitAdjacency) and int(ix.split) == sp.entry == ix.a.shape[0]
            assert ix.a.shape[0] + ix.b.shape[0] == g.nnz and np.array_equal(joined(ix), g.indices)
            assert (ix.a if order == "prefix" else ix.b).shape[0] == sp.device_entries
            assert sp.mode == {"host": "host", "all": "device"}.get(name, "split"), (order, name, sp)
            assert np.array_equal(sg.meta["_hub"], g.meta["_hub"])     # the helpers, rebuilt from the pieces
            for a, o in RUNS:
                for i, r in enumerate(roots):
                    ref = want[(a, tuple(o.items()), r)]
                    got = bfs(sg, r, a, stats=True, levels=True, **o)
                    where = f"{a} {o} {order} {name} root {r}"
                    assert _levels(got) == _levels(ref), where
                    assert np.array_equal(got.levels, ref.levels), where
                    if i < 2 or scale <= 10:
                        v = validate(edges, r, got.parent, n)
                        assert v.ok, f"{where}: {v.summary()}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 90), st.data())
def test_split_search_property(n, data):
    """Random small graphs (isolated vertices, hubs, multi-edges kept or not), any budget and order."""
    m = data.draw(st.integers(0, 4 * n))
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=m, max_size=m))
    edges = np.array(pairs, np.int64).reshape(-1, 2)
    g = build_csr(edges, n_vertices=n, dedupe=data.draw(st.booleans()),
                  relabel=data.draw(st.sampled_from(["none", "degree"])))
    sp = plan_split(g.indptr, data.draw(st.integers(0, g.nnz + 1)), data.draw(st.sampled_from(ORDERS)), 4)
    sg = split_graph(g, sp)
    root = data.draw(st.integers(0, n - 1))
    for a in SPLIT_ALGORITHMS:
        ref = bfs(g, root, a, stats=True, levels=True)
        got = bfs(sg, root, a, stats=True, levels=True)
        assert _levels(got) == _levels(ref) and np.array_equal(got.levels, ref.levels), (a, sp)
        assert validate(edges, root, got.parent, n).ok, (a, sp)


def test_adj_at_reads_the_right_piece():
    ix = np.arange(10, 20, dtype=np.int32)
    for k in range(11):
        sa = SplitAdjacency(ix[:k].copy(), ix[k:].copy(), np.int64(k))
        assert [adj_at(sa, j) for j in range(10)] == list(range(10, 20))


def test_algorithms_that_read_one_array_refuse_a_split(golden10):
    g = build_csr(golden10["edges"], n_vertices=1 << 10)
    sg = split_graph(g, plan_split(g.indptr, g.nnz // 2, "prefix", 4))
    for a in ("seq-csr", "seq-list", "spmv"):
        with pytest.raises(DbfsError) as e:
            bfs(sg, golden10["roots"][0], a)
        assert "\n" not in str(e.value) and a in str(e.value) and "td, bu, do" in str(e.value)
    with pytest.raises(ValueError, match="split already"):
        split_graph(sg, plan_split(g.indptr, 0))
    with pytest.raises(ValueError, match="planned for"):
        split_graph(g, plan_split(g.indptr[:-1], 0))


_NO_LOAD_SCRIPT = r"""
import numpy as np
from numba.core.registry import CPUDispatcher
import sys
from dbfs.bfs import bfs, prepare
from dbfs.bfs.cpu import split_graph
from dbfs.generate.graph500 import kronecker_edges
from dbfs.kernel1 import build_csr
from dbfs.roots import graph500_roots
from dbfs.split import plan_split

edges = kronecker_edges(14)
roots = graph500_roots(edges, 14, n=8).tolist()
g = build_csr(edges, n_vertices=1 << 14, relabel="degree")
g = prepare(split_graph(g, plan_split(g.indptr, g.nnz // 3, "suffix", 4)))
mods = [m for name, m in sorted(sys.modules.items()) if name.startswith("dbfs.bfs.cpu.")]
sigs = lambda: {f"{m.__name__}.{k}": len(v.signatures) for m in mods for k, v in vars(m).items()
                if isinstance(v, CPUDispatcher)}
runs = [("do", {}), ("do", {"policy": "change_state"}), ("td", {}), ("bu", {})]
for a, o in runs:
    bfs(g, roots[0], a, **o)
before = sigs()
for a, o in runs:
    for r in roots[1:]:
        bfs(g, r, a, **o)
print(sorted(k for k, v in sigs().items() if v != before[k]))
"""


def test_split_searches_load_no_kernel_after_one_search():
    """warm_kernels loads the split kernels too: in a fresh process, after one search of a split graph per
    algorithm, later searches compile or load nothing (it would be timed)."""
    out = subprocess.run([sys.executable, "-c", _NO_LOAD_SCRIPT], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


# ---------------------------------------------------------------- the CLI
def test_cli_run_split_scale16(tmp_path, dbfs_cli):
    js = tmp_path / "r.json"
    res = dbfs_cli("run", "--scale", 16, "--backend", "cpu", "--relabel", "degree", "--placement", "degree-low",
                   "--device-memory-limit", "1MiB", "--roots", 4, "--datasets", tmp_path / "ds",
                   "--scheduler", "threads", "--json", js)
    said = [line for line in res.stderr.splitlines() if "simulated in host memory" in line]
    assert len(said) == 1 and "--device-memory-limit" in said[0] and "degree-low" in said[0], res.stderr
    rec = json.loads(js.read_text())
    assert len(rec["searches"]) == 4 and all(s["valid"] for s in rec["searches"]) and rec["validated"]
    pl = rec["config"]["placement"]
    assert pl["mode"] == "split" and pl["order"] == "suffix" and pl["simulated"] == "host memory"
    n = 1 << 16
    assert pl["device_bytes"] <= (1 << 20) - 8 * (n + 1) and pl["device_entries"] > 0 and pl["host_entries"] > 0
    assert pl["device_bytes"] == 4 * pl["device_entries"] and 0 < pl["device_fraction"] < 1
    # the same graph unsplit: the same Graph500 nedge, and no placement in the JSON
    js0 = tmp_path / "r0.json"
    res0 = dbfs_cli("run", "--scale", 16, "--backend", "cpu", "--relabel", "degree", "--roots", 4,
                    "--datasets", tmp_path / "ds", "--json", js0)
    assert [ln for ln in res0.stdout.splitlines() if "nedge" in ln] == \
        [ln for ln in res.stdout.splitlines() if "nedge" in ln]
    assert "placement" not in json.loads(js0.read_text())["config"] and "simulated" not in res0.stderr


def test_default_placement_keeps_the_low_degree_rows_of_a_degree_ordered_csr(tmp_path, dbfs_cli):
    """``block``, the default, splits a degree-ordered CSR with its low-degree tail on the device (hubs first
    measured slowest); scrambled ids keep their first rows; ``degree`` still asks for the hubs."""
    from dbfs.split import split_order

    assert split_order("block", "degree") == "suffix" and split_order("block", "none") == "prefix"
    assert split_order("degree", "degree") == "prefix" and split_order("degree-low", "degree") == "suffix"
    with pytest.raises(KeyError):
        split_order("random", "degree")
    js = tmp_path / "r.json"
    dbfs_cli("run", "--scale", 12, "--backend", "cpu", "--relabel", "degree", "--device-memory-limit", "64KiB",
             "--roots", 2, "--datasets", tmp_path / "ds", "--scheduler", "threads", "--json", js)
    pl = json.loads(js.read_text())["config"]["placement"]
    assert pl["mode"] == "split" and pl["order"] == "suffix"


@pytest.mark.parametrize("placement", ["block", "degree"])
def test_cli_bfs_split_levels_equal_unsplit(tmp_path, dbfs_cli, placement):
    args = ("bfs", "--scale", 10, "--root", 458, "--relabel", "degree", "--datasets", tmp_path)
    one = dbfs_cli(*args).stdout.splitlines()
    two = dbfs_cli(*args, "--device-memory-limit", "12KiB", "--placement", placement)
    assert "simulated in host memory" in two.stderr
    two_lines = two.stdout.splitlines()
    # level, dir, frontier, edges examined of every level line
    assert [ln.split()[:4] for ln in two_lines[2:-1]] == [ln.split()[:4] for ln in one[2:-1]] and len(one) > 3
    assert two_lines[-1].split("  time")[0] == one[-1].split("  time")[0]


REFUSED = [
    (["--device-memory-limit", "1MiB", "--algorithm", "spmv"], ["--algorithm spmv", "--device-memory-limit"]),
    (["--device-memory-limit", "1MiB", "--algorithm", "seq-csr"], ["--algorithm seq-csr", "td, bu, do"]),
    (["--device-memory-limit", "1MiB", "--placement", "degree-low", "--relabel", "none"],
     ["--placement degree-low", "--relabel degree"]),
    (["--device-memory-limit", "1MiB", "--placement", "random"], ["--placement random", "--backend cpu"]),
    (["--placement", "degree", "--relabel", "degree"], ["--placement degree", "--device-memory-limit"]),
]


@pytest.mark.parametrize("args,words", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_cli_refuses_what_cannot_split(tmp_path, dbfs_cli, args, words):
    for cmd in (["run"], ["bfs", "--root", "1"]):
        res = dbfs_cli(*cmd, "--scale", 8, "--backend", "cpu", *args, "--datasets", tmp_path, ok=False)
        err = res.stderr.strip()
        assert res.exit_code == 2 and len(err.splitlines()) == 1 and err.startswith("dbfs: error: "), err
        assert all(w in err for w in words), (words, err)
        assert not any(tmp_path.iterdir()), "a refused command must do no work"
