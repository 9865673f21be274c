"""The device/host split of a CSR's adjacency (dbfs.split) and the placed build's budgets:
the parts that run without a GPU (the searches over a split run on the device: tests/test_gpu_split.py)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dbfs.split import plan_split
from dbfs.kernel1.build_placed import PASS_PER_VERTEX, SEARCH_PER_VERTEX, placed_budgets


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=0, max_size=40), st.integers(-3, 400),
       st.sampled_from(["prefix", "suffix"]))
def test_split_is_the_largest_run_of_whole_rows_that_fits(degrees, cap, order):
    ip = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    n, nnz = len(degrees), int(ip[-1])
    sp = plan_split(ip, cap, order, 4)
    assert 0 <= sp.row <= n and sp.entry == ip[sp.row] and sp.nnz == nnz
    assert sp.device_entries <= max(cap, 0) or sp.device_entries == 0
    assert sp.device_entries + sp.host_entries == nnz
    # one more non-empty row would not fit (maximal), unless every entry is on the device
    if order == "prefix":
        assert sp.device_entries == ip[sp.row]
        nxt = [r for r in range(sp.row, n) if degrees[r]]
        assert not nxt or ip[nxt[0] + 1] > cap
    else:
        assert sp.device_entries == nnz - ip[sp.row]
        prv = [r for r in range(sp.row) if degrees[r]]
        assert not prv or nnz - ip[prv[-1]] > cap
    rep = sp.report()
    assert rep["device_bytes"] == 4 * sp.device_entries and rep["host_bytes"] == 4 * sp.host_entries
    assert rep["mode"] == ("device" if sp.host_entries == 0 else "host" if sp.device_entries == 0 else "split")


def test_split_modes_and_orders():
    ip = np.array([0, 5, 6, 6, 10], np.int64)           # rows of 5, 1, 0, 4 entries
    assert plan_split(ip, 10).mode == "device" and plan_split(ip, 0).mode == "host"
    sp = plan_split(ip, 7, "prefix")
    assert (sp.row, sp.entry, sp.device_entries, sp.mode) == (3, 6, 6, "split")   # rows 0-2 (empty row 2 too)
    sp = plan_split(ip, 7, "suffix")
    assert (sp.row, sp.entry, sp.device_entries) == (1, 5, 5)                      # rows 1-3
    with pytest.raises(ValueError, match="unknown split order"):
        plan_split(ip, 3, "middle")


def test_placed_budgets():
    n, gib = 1 << 30, 1 << 30
    adj = 2 * (16 << 30) * 4                                        # SCALE 30's raw adjacency, int32
    piece, passes = placed_budgets(n, adj, 131 * gib)                # on an H200
    assert piece == 131 * gib - 8 * (n + 1) - SEARCH_PER_VERTEX * n - 2 * gib
    assert passes == 131 * gib - piece - gib and passes > PASS_PER_VERTEX * n
    piece, passes = placed_budgets(1 << 28, adj >> 2, 131 * gib)     # SCALE 28: the whole adjacency fits
    assert piece == adj >> 2 and passes == 131 * gib - piece - gib
    piece, passes = placed_budgets(1 << 26, 1 << 33, 13 * gib)       # a small GPU: a pass keeps its floor
    assert passes >= PASS_PER_VERTEX * (1 << 26) + 3 * gib
    piece, passes = placed_budgets(1024, 1 << 20, 10 * gib, device_limit=8 * 1025 + 4096)
    assert piece == 4096 and passes == 10 * gib - 4096 - gib        # the limit is the CSR's share of the device
    assert placed_budgets(1024, 1 << 20, 10 * gib, device_limit=10)[0] == 0


def test_placed_build_fits_host_memory_or_refuses_in_one_line(monkeypatch):
    """The placed build's host check: the validation batch shrinks (device memory back to the adjacency)
    until the pinned piece fits; when even one search per batch does not fit, one line before any pass."""
    from types import SimpleNamespace

    import dbfs.preflight as pf
    from dbfs.errors import DbfsError
    from dbfs.kernel1.build_placed import VALIDATE_BATCH, _fit_host, host_need

    gib = 1 << 30
    ds = SimpleNamespace(name="kron-s30-ef16-s2-3", n_vertices=1 << 30, n_edges=16 << 30)
    free = 131 * gib
    monkeypatch.setattr(pf, "host_available", lambda: 200 * gib)         # room for the largest batch
    assert _fit_host(ds, 4, free, None, VALIDATE_BATCH)[0] == VALIDATE_BATCH
    monkeypatch.setattr(pf, "host_available", lambda: 123 * gib)         # the H200 box: a batch of 2
    k, piece, passes = _fit_host(ds, 4, free, None, VALIDATE_BATCH)
    assert 1 < k < VALIDATE_BATCH and host_need(ds.n_vertices, 2 * ds.n_edges * 4, piece, 4) <= 0.88 * 123 * gib
    assert piece + passes < free
    monkeypatch.setattr(pf, "host_available", lambda: 40 * gib)
    with pytest.raises(DbfsError) as e:
        _fit_host(ds, 4, free, None, VALIDATE_BATCH)
    msg = str(e.value)
    assert "\n" not in msg and "fits neither the GPU nor the GPU and host memory together" in msg
    assert "short" in msg and "kron-s30-ef16-s2-3" in msg
