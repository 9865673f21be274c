"""Generator: bit-exact with Graph500 3.0.1, independent of chunking and scheduler."""
import hashlib

import numpy as np
import pytest

import dbfs
from dbfs.generate import edges_dask
from dbfs.generate import mrg
from dbfs.spec import GraphSpec


def test_mrg_seed_and_scramble_constants():
    assert mrg.seed_state(2, 3) == [3, 1, 4, 1, 1]
    from dbfs.generate.graph500 import scramble_values

    assert scramble_values(2, 3) == (0x62AF6660B44FCE69, 0x2A3D763B3A6B1F0C)


def test_scale10_full_edge_list(golden10):
    e = dbfs.kronecker_edges(10)
    assert e.dtype == np.int64 and e.shape == (16384, 2)
    np.testing.assert_array_equal(e, golden10["edges"])
    assert hashlib.sha256(e.astype("<i8").tobytes()).hexdigest() == golden10["edges_sha256"]


def test_scale16_sha_first_last(golden16):
    e = dbfs.kronecker_edges(16)
    assert e.shape == (golden16["n_edges"], 2)
    assert hashlib.sha256(e.astype("<i8").tobytes()).hexdigest() == golden16["edges_sha256"]
    np.testing.assert_array_equal(e[:32], golden16["first_edges"])
    np.testing.assert_array_equal(e[-8:], golden16["last_edges"])
    loops = int((e[:, 0] == e[:, 1]).sum())
    assert loops == golden16["self_loops"]


def test_any_range_alone(golden16):
    whole = dbfs.kronecker_edges(12)
    for lo, hi in [(0, 1), (5, 4100), (4095, 4097), (65535, 65536), (1000, 1000)]:
        np.testing.assert_array_equal(dbfs.kronecker_edges(12, start=lo, stop=hi), whole[lo:hi])


def test_roots_scale10_and_16(golden10, golden16):
    assert dbfs.graph500_roots(golden10["edges"], 10).tolist() == golden10["roots"]
    assert dbfs.graph500_roots(dbfs.kronecker_edges(16), 16).tolist() == golden16["roots"]


def test_roots_fewer_when_few_eligible():
    # only vertices 0 and 1 have a non-self-loop edge; 2 has only a self-loop
    edges = np.array([[0, 1], [2, 2], [1, 0]])
    roots = dbfs.graph500_roots(edges, 3, n=64)
    assert sorted(roots.tolist()) == [0, 1]


def test_roots_from_zarr_equal_numpy(tmp_path, golden10):
    import zarr

    z = zarr.create_array(tmp_path / "e", shape=golden10["edges"].shape, chunks=(1000, 2), dtype="uint32")
    z[:] = golden10["edges"]
    assert dbfs.graph500_roots(z, 10).tolist() == golden10["roots"]


def test_other_seeds_and_edgefactor_differ_and_are_ranges():
    a = dbfs.kronecker_edges(8, edgefactor=4, seed1=2**64 - 1, seed2=12345)
    b = dbfs.kronecker_edges(8, edgefactor=4)
    assert a.shape == (1024, 2) and not np.array_equal(a, b)
    assert a.max() < 256 and a.min() >= 0
    np.testing.assert_array_equal(dbfs.kronecker_edges(8, 4, 2**64 - 1, 12345, 100, 200), a[100:200])


def test_large_scale_range_ids_fit():
    e = dbfs.kronecker_edges(40, start=10**12, stop=10**12 + 64)
    assert e.shape == (64, 2) and e.min() >= 0 and e.max() < 2**40


@pytest.mark.parametrize("bad", [dict(scale=0), dict(scale=43), dict(edgefactor=0), dict(seed1=-1), dict(seed2=2**64)])
def test_bad_params(bad):
    kw = dict(scale=4)
    kw.update(bad)
    with pytest.raises(dbfs.DbfsError):
        dbfs.kronecker_edges(**kw)


def test_rmat_default_initiator_is_graph500():
    from dbfs.generate.rmat import rmat_edges

    np.testing.assert_array_equal(rmat_edges(10), dbfs.kronecker_edges(10))
    other = rmat_edges(10, a=0.45, b=0.22, c=0.22)
    assert not np.array_equal(other, dbfs.kronecker_edges(10))
    np.testing.assert_array_equal(rmat_edges(10, a=0.45, b=0.22, c=0.22, start=77, stop=999), other[77:999])
    with pytest.raises(dbfs.DbfsError):
        rmat_edges(10, a=0.8, b=0.2, c=0.2)


def test_dask_chunkings_identical():
    spec = GraphSpec.make(scale=12)
    a = edges_dask(spec, 1000).compute(scheduler="threads")
    b = edges_dask(spec, 65536).compute(scheduler="sync")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, dbfs.kronecker_edges(12))


@pytest.mark.distributed
def test_two_process_localcluster_identical():
    from distributed import Client, LocalCluster

    spec = GraphSpec.make(scale=12)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        got = client.compute(edges_dask(spec, 777)).result()
    np.testing.assert_array_equal(got, dbfs.kronecker_edges(12))
