"""Kernel 1 in passes (dbfs.kernel1.passes, dbfs.kernel1.passes_gpu): the same bytes as the one-pass
build for 1, 2, 3 and many passes over stored and virtual datasets (real zarr stores, regenerated
chunks), every pass's measured allocations within its planned bytes, budget errors in one line, and
the CLI's --device-memory-limit surface. GPU tests (marker gpu) skip without a device."""
import tracemalloc

import numpy as np
import pytest
from click.testing import CliRunner

from dbfs import kernel1, store
from dbfs.cli import cli
from dbfs.errors import DbfsError
from dbfs.kernel1.passes import build_csr_passes, chunk_cost, min_budget
from dbfs.spec import GraphSpec


def _gen(root, scale, edges, chunk):
    ds, _ = store.generate(GraphSpec.make(scale=scale), root, chunk_edges=chunk, quiet=True, edges=edges)
    return ds


@pytest.fixture(scope="module")
def s12(tmp_path_factory):
    """SCALE 12 stored (chunks of 5000 rows) and virtual (7000): datasets and the one-pass CSR."""
    root = tmp_path_factory.mktemp("passes")
    st, vi = _gen(root / "s", 12, "stored", 5000), _gen(root / "v", 12, "virtual", 7000)
    ref = kernel1.build_csr(st.edges()[:], st.n_vertices)
    build_csr_passes(st.edges(), st.n_vertices)   # compiled before any pass is measured
    return {"stored": st, "virtual": vi, "ref": ref}


def _raw_ptr(edges, n):
    e = np.asarray(edges, np.int64)
    e = e[e[:, 0] != e[:, 1]]
    return np.concatenate([[0], np.cumsum(np.bincount(e.ravel(), minlength=n))]).astype(np.int64)


def _budget_for(arr, n, passes):
    """The smallest budget whose plan has at most ``passes`` passes."""
    return min_budget(_raw_ptr(arr[:], n), arr.chunks[0], arr.dtype.itemsize, passes)


def _measured(edges, **kw):
    """Build with tracemalloc on: (graph, [(pass, measured peak bytes, planned bytes)])."""
    rec, cur = [], {}

    def hook(ev, k, info):
        if ev == "start":
            tracemalloc.reset_peak()
            cur[k] = tracemalloc.get_traced_memory()[0]
        else:
            rec.append((k, tracemalloc.get_traced_memory()[1] - cur[k], info["planned"]))

    tracemalloc.start()
    try:
        g = build_csr_passes(edges, on_pass=hook, **kw)
    finally:
        tracemalloc.stop()
    return g, rec


@pytest.mark.parametrize("storage", ["stored", "virtual"])
@pytest.mark.parametrize("passes", [1, 2, 3, "many"])
def test_same_bytes_as_one_pass_within_budget(s12, storage, passes):
    ds, ref = s12[storage], s12["ref"]
    arr = ds.edges()
    want = 40 if passes == "many" else passes
    budget = _budget_for(arr, ds.n_vertices, want)
    g, rec = _measured(arr, n_vertices=ds.n_vertices, memory_budget=budget)
    info = g.meta["passes"]
    assert (info["count"] >= 20) if passes == "many" else (info["count"] == passes), info["count"]
    assert g.indptr.dtype == ref.indptr.dtype and g.indices.dtype == ref.indices.dtype
    assert g.indptr.tobytes() == ref.indptr.tobytes() and g.indices.tobytes() == ref.indices.tobytes()
    assert info["peak_planned"] <= budget
    assert len(rec) == info["count"] + 1           # the degree pass and every range pass
    for k, peak, planned in rec:                   # what each pass allocated, within its plan
        assert peak <= planned, (k, peak, planned)
    ranges = info["ranges"]
    assert ranges[0][0] == 0 and ranges[-1][1] == ds.n_vertices
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def _rows_of(ref, lo, hi):
    """Rows [lo, hi) of a whole CSR: (indptr from 0, indices)."""
    ip = ref.indptr[lo:hi + 1]
    return ip - ip[0], ref.indices[ip[0]:ip[-1]]


@pytest.mark.parametrize("storage", ["stored", "virtual"])
@pytest.mark.parametrize("dedupe", [True, False])
def test_rows_are_the_whole_builds_rows_and_the_stored_partitions(s12, storage, dedupe):
    """``rows=(lo, hi)``: a block partition's rows built alone, in one pass or several, are those rows of the
    whole build, and the partitioned zarr variant's partitions byte for byte."""
    ds = s12[storage]
    n = ds.n_vertices
    ref = s12["ref"] if dedupe else kernel1.build_csr(ds.edges()[:], n, dedupe=False)
    cuts = [(0, n), (0, 1000), (1000, 1001), (1001, 2731), (2731, n), (7, 7)]
    for lo, hi in cuts:
        for budget in (1 << 30, _budget_for(ds.edges(), n, 40)):
            g = build_csr_passes(ds.edges(), n, dedupe=dedupe, memory_budget=budget, rows=(lo, hi))
            ip, ix = _rows_of(ref, lo, hi)
            assert g.meta["rows"] == (lo, hi) and g.indptr.size == hi - lo + 1
            assert g.indptr.tobytes() == ip.tobytes() and g.indices.tobytes() == ix.tobytes(), (lo, hi, budget)
    if storage == "stored":
        from dbfs.partition import Partitioning

        a = kernel1.build_partitioned(ds.path, P=3, dedupe=dedupe, progress=False)
        for j, rg in enumerate(Partitioning(n, 3, "block").vertex_range(r) for r in range(3)):
            ip, ix, _ = kernel1.load_partition(ds.path, a["variant"], j)
            g = build_csr_passes(ds.edges(), n, dedupe=dedupe, rows=(rg.start, rg.stop))
            assert g.indptr.tobytes() == np.asarray(ip).tobytes() and g.indices.tobytes() == np.asarray(ix).tobytes()
    with pytest.raises(DbfsError, match=r"rows \[5, 3\) are not within"):
        build_csr_passes(ds.edges(), n, rows=(5, 3))


def test_keep_duplicates_and_scale16_virtual(tmp_path, s12):
    ds = s12["virtual"]
    ref = kernel1.build_csr(ds.edges()[:], ds.n_vertices, dedupe=False)
    budget = _budget_for(ds.edges(), ds.n_vertices, 3)
    g = build_csr_passes(ds.edges(), ds.n_vertices, dedupe=False, memory_budget=budget)
    assert g.meta["passes"]["count"] == 3
    assert g.indptr.tobytes() == ref.indptr.tobytes() and g.indices.tobytes() == ref.indices.tobytes()
    big = _gen(tmp_path, 16, "virtual", 1 << 18)
    ref = kernel1.build_csr(big.edges()[:], big.n_vertices)
    arr = big.edges()
    fixed = 8 * (big.n_vertices + 1) + chunk_cost(arr.chunks[0], arr.dtype.itemsize)
    g = build_csr_passes(arr, big.n_vertices, memory_budget=fixed + 4 * ref.indices.size // 2)
    assert g.meta["passes"]["count"] >= 3
    assert g.indptr.tobytes() == ref.indptr.tobytes() and g.indices.tobytes() == ref.indices.tobytes()


def test_numpy_input_and_sink(golden10):
    e = golden10["edges"]
    ref = kernel1.build_csr(e)
    g = build_csr_passes(e, memory_budget=8 * (ref.n_vertices + 1) + 20000)
    assert g.meta["passes"]["count"] > 3 and g.n_vertices == ref.n_vertices
    assert g.indptr.tobytes() == ref.indptr.tobytes() and g.indices.tobytes() == ref.indices.tobytes()
    blocks = []
    meta = build_csr_passes(e, ref.n_vertices, memory_budget=8 * (ref.n_vertices + 1) + 20000,
                            sink=lambda lo, hi, p, i: blocks.append((lo, hi, p.copy(), i.copy())))
    assert [(lo, hi) for lo, hi, _, _ in blocks] == meta["passes"]["ranges"]
    assert np.concatenate([i for *_, i in blocks]).tobytes() == ref.indices.tobytes()


def test_budget_errors_are_one_line(s12):
    ds = s12["stored"]
    arr = ds.edges()
    fixed = 8 * (ds.n_vertices + 1) + chunk_cost(arr.chunks[0], arr.dtype.itemsize)
    hub = int(np.diff(_raw_ptr(arr[:], ds.n_vertices)).max())
    with pytest.raises(DbfsError) as ei:                     # the hub row alone is over the budget
        build_csr_passes(arr, ds.n_vertices, memory_budget=fixed + 4 * hub - 100, budget_name="--device-memory-limit")
    msg = str(ei.value)
    assert "\n" not in msg and "--device-memory-limit" in msg and f"{fixed + 4 * hub + 32} B" in msg, msg
    with pytest.raises(DbfsError, match=r"^memory_budget 1000 B is too small for the degree pass .* at least \d+ B$"):
        build_csr_passes(arr, ds.n_vertices, memory_budget=1000)
    with pytest.raises(DbfsError, match="outside"):
        build_csr_passes(np.array([[0, 5]], np.int64), 3)


def test_cli_device_memory_limit_refused_on_cpu(s12):
    ds = s12["stored"]
    res = CliRunner().invoke(cli, ["build", ds.name, "--datasets", str(ds.path.parent), "--device-memory-limit",
                                   "1GiB"], catch_exceptions=False)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and "--device-memory-limit" in lines[0], res.stderr


# ----------------------------------------------------------------------------- GPU (skip here)
@pytest.mark.gpu
@pytest.mark.parametrize("scale,storage", [(18, "virtual"), (20, "stored")])
def test_gpu_passes_same_bytes_within_device_budget(cp, tmp_path, scale, storage):
    from dbfs.kernel1.passes_gpu import build_csr_gpu_passes, device_cost
    from dbfs.store.gpu import device_chunks

    ds = _gen(tmp_path, scale, storage, 1 << 18)
    ref = kernel1.build_csr(ds.edges()[:], ds.n_vertices)
    src = device_chunks(ds)
    n = ds.n_vertices
    fixed = device_cost(n, src.step, 0, 0)
    budget = fixed + (32 * 2 * ds.n_edges) // 4           # about a quarter of the entries per pass
    pool = cp.get_default_memory_pool()
    seen = []
    g = build_csr_gpu_passes(src, n, memory_budget=budget,
                             on_pass=lambda ev, k, info: seen.append((k, pool.total_bytes())) if ev == "end" else None)
    assert g.meta["passes"]["count"] >= 3
    assert g.indptr.tobytes() == ref.indptr.tobytes() and g.indices.tobytes() == ref.indices.tobytes()
    assert len(seen) == g.meta["passes"]["count"] + 1
    for k, held in seen:                                  # the pool's footprint of each pass (freed between)
        assert held <= budget, (k, held, budget)
    lo, hi = n // 3, n // 3 + n // 4                       # one block of rows alone, in passes too
    r = build_csr_gpu_passes(src, n, memory_budget=budget, rows=(lo, hi))
    ip = ref.indptr[lo:hi + 1]
    assert r.meta["rows"] == (lo, hi) and r.meta["passes"]["count"] >= 1
    assert r.indptr.tobytes() == (ip - ip[0]).tobytes()
    assert r.indices.tobytes() == ref.indices[ip[0]:ip[-1]].tobytes()


@pytest.mark.gpu
def test_gpu_passes_relabelled_within_blocks(cp, tmp_path):
    """relabel_bounds: one block is the whole graph's degree order (build_csr's relabelled bytes); two
    blocks keep their id ranges, each by descending degree within itself, and a block's rows are the plain
    build's rows of the edges mapped through that numbering."""
    from dbfs.kernel1.passes_gpu import build_csr_gpu_passes
    from dbfs.store.gpu import device_chunks

    ds = _gen(tmp_path, 14, "stored", 1 << 16)
    n, edges = ds.n_vertices, ds.edges()[:]
    ref = kernel1.build_csr(edges, n, relabel="degree")
    g = build_csr_gpu_passes(device_chunks(ds), n, memory_budget=1 << 28, on_device=True, relabel_bounds=[0, n])
    assert g.meta["relabel"] == "degree" and cp.asnumpy(g.meta["perm"]).tolist() == ref.perm.tolist()
    assert cp.asnumpy(g.indptr).tobytes() == ref.indptr.tobytes()
    assert cp.asnumpy(g.indices).tobytes() == ref.indices.tobytes()
    lo = n // 2 - 5                                       # blocks [0, lo), [lo, n)
    g2 = build_csr_gpu_passes(device_chunks(ds), n, memory_budget=1 << 28, on_device=True, rows=(lo, n),
                              relabel_bounds=[0, lo, n])
    perm = cp.asnumpy(g2.meta["perm"]).astype(np.int64)
    assert sorted(perm[:lo].tolist()) == list(range(lo)) and sorted(perm[lo:].tolist()) == list(range(lo, n))
    deg = kernel1.raw_degree(edges, n)                   # the order is by raw degree (duplicates, loops counted)
    for a, b in ((0, lo), (lo, n)):
        d = deg[perm[a:b]]
        assert (np.diff(d) <= 0).all() and all(perm[a + i] < perm[a + i + 1] for i in range(b - a - 1)
                                               if d[i] == d[i + 1])
    iperm = np.empty(n, np.int64)
    iperm[perm] = np.arange(n)
    mapped = kernel1.build_csr(iperm[edges.astype(np.int64)], n)
    ip = mapped.indptr[lo:n + 1]
    assert cp.asnumpy(g2.indptr).tobytes() == (ip - ip[0]).tobytes()
    assert cp.asnumpy(g2.indices).tobytes() == mapped.indices[ip[0]:ip[-1]].tobytes()
    with pytest.raises(DbfsError, match="on_device"):
        build_csr_gpu_passes(device_chunks(ds), n, relabel_bounds=[0, n])


@pytest.mark.gpu
def test_gpu_cli_build_in_passes(cp, tmp_path):
    root = tmp_path / "d"
    ds = _gen(root, 14, "virtual", 1 << 12)
    ref = kernel1.build_csr(ds.edges()[:], ds.n_vertices)
    run = CliRunner().invoke
    res = run(cli, ["build", ds.name, "--datasets", str(root), "--backend", "gpu", "--device-memory-limit", "4MiB"],
              catch_exceptions=False)
    assert res.exit_code == 0, res.output + res.stderr
    assert "passes" in res.output
    g = kernel1.load_csr(ds.path, "p1-block")
    assert g.indptr.tobytes() == ref.indptr.tobytes() and g.indices.tobytes() == ref.indices.tobytes()
    res = run(cli, ["build", ds.name, "--datasets", str(root), "--backend", "gpu", "--force",
                    "--device-memory-limit", "100KiB"], catch_exceptions=False)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and "--device-memory-limit" in lines[0], res.stderr


@pytest.mark.parametrize("starts", ["every row", "pass bounds"])
@pytest.mark.parametrize("order", ["prefix", "suffix"])
@pytest.mark.parametrize("frac", [0.0, 0.3, 1.5])
def test_placer_splits_cpu_passes(s12, order, frac, starts):
    """The device/host placement of the GPU's placed Kernel 1 (dbfs.kernel1.placer), run here with NumPy
    pieces and the CPU passes as the source (the split simulated by budget on the CPU): the pieces hold the
    one-pass CSR's bytes, split at whole rows, the device piece within its budget and maximal. With the raw row
    starts known at the passes' bounds only (``PassStarts``, what the GPU shuffle gives), the host piece is sized
    by their bound and still holds every entry."""
    from dbfs.kernel1.placer import PassStarts, Placer

    ds, ref = s12["stored"], s12["ref"]
    n = ds.n_vertices
    blocks = []
    build_csr_passes(ds.edges(), n, memory_budget=_budget_for(ds.edges(), n, 5),
                     sink=lambda lo, hi, ptr, idx: blocks.append((lo, hi, ptr.copy(), idx.copy())))
    assert len(blocks) >= 4
    cap = int(frac * ref.nnz)
    raw = _raw_ptr(ds.edges()[:], n)
    if starts == "pass bounds":
        bounds = [blocks[0][0]] + [hi for _, hi, _, _ in blocks]
        exact, raw = raw, PassStarts(bounds, raw[bounds], order)
        known = np.array([raw[r] for r in range(n + 1)])     # an upper bound of the entries on the host's side
        assert (known <= exact).all() if order == "prefix" else (known >= exact).all()
        assert (known[bounds] == exact[bounds]).all()
    placer = Placer(n, cap, raw, ref.indices.dtype, order)
    for b in (blocks if order == "prefix" else blocks[::-1]):
        placer(*b)
    indptr, sp, (a, b, split) = placer.finish()
    assert indptr.tobytes() == ref.indptr.tobytes()
    assert sp.mode == {0.0: "host", 0.3: "split", 1.5: "device"}[frac] and sp.order == order
    whole = a[:sp.nnz] if sp.mode != "split" else np.concatenate([a[:int(split)], b[:sp.nnz - int(split)]])
    assert whole.tobytes() == ref.indices.tobytes()
    assert sp.device_entries <= cap and sp.entry == ref.indptr[sp.row]
    if sp.mode == "split":      # the next row toward the other end would not fit
        deg = np.diff(ref.indptr)
        nxt = deg[sp.row] if order == "prefix" else deg[sp.row - 1]
        assert sp.device_entries + nxt > cap
