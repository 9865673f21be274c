"""Threaded checked chunk reads (dbfs.store.chunk_read) and the loads built on them, on real zarr stores.

The reader fills a caller's buffer with any span of a stored array and returns the values' sum mod 2**64;
its checks are a CheckedArray read's (crc32c, decoded size, position-keyed digests: the same one-line
error for the same damage), never fewer (every chunk a span touches is checked whole), the lowest damaged
chunk named whatever the threads. load_partition reads through it. On a GPU (marker ``gpu``): a partition
read straight into device memory in pinned slabs (ids converted to the id width there) and its hub table
built there are the host-loaded partition bit for bit.
"""
import os
import shutil
import struct

import numcodecs
import numpy as np
import pytest
import zarr

from dbfs.errors import DbfsError
from dbfs.kernel1.kernels import _wrapsum
from dbfs.store.chunk_read import ChunkReader, default_threads
from dbfs.store.crc import crc32c
from dbfs.store.integrity import CheckedArray, adjacency_compressors, compressors, seal_digests, write_rows

CHUNK = 1000


def stored(root, values, codec="blosc", digests=True, crc=True):
    """A real stored 1-D array as dbfs writes one (every chunk written, digests sealed), opened checked."""
    comps = adjacency_compressors() if codec == "blosc" else compressors()
    if codec == "gzip":                       # not a chain the fast path decodes: read through zarr
        from zarr.codecs import GzipCodec

        comps = [GzipCodec(level=1), *comps[-1:]]
    comps = comps if crc else comps[:-1]
    g = zarr.open_group(str(root), mode="a")
    z = g.create_array("arr", shape=values.shape, chunks=(CHUNK,), dtype=values.dtype, compressors=comps,
                       fill_value=0).with_config({"write_empty_chunks": True})
    if digests:
        write_rows(z, root / "arr", 0, values)
        seal_digests(root / "arr")
    else:
        z[:] = values
    return opened(root)


def opened(root):
    return CheckedArray(zarr.open_array(str(root / "arr"), mode="r"), root, "arr", "dataset t", "rebuild it",
                        unit="entries")


def values(n=10_500, dtype=np.int32, seed=0):
    return np.random.default_rng(seed).integers(0, 1 << 30, n).astype(dtype)


def wsum(a):
    return int(_wrapsum(np.ascontiguousarray(a), 1)) if a.size else 0


@pytest.mark.parametrize("codec,dtype", [("blosc", np.int32), ("blosc", np.int64), ("zstd", np.int64),
                                         ("gzip", np.int64)])
@pytest.mark.parametrize("threads", [1, 3])
def test_spans_equal_zarr_and_sum(tmp_path, codec, dtype, threads):
    """Whole array and spans cutting chunks (the short last chunk too), into a caller's buffer in place."""
    v = values(dtype=dtype)
    arr = stored(tmp_path, v, codec)
    with ChunkReader(threads) as rd:
        got, s = rd.read(arr)
        assert got.tobytes() == v.tobytes() and s == wsum(v)
        big = np.full(v.size + 20, -1, dtype)
        for lo, hi in [(0, 1), (5, 2_995), (1_000, 3_000), (999, 1_001), (9_999, 10_500), (10_400, 10_500), (7, 7)]:
            out = big[10:10 + hi - lo]
            assert rd.read_into(arr, out, lo, hi) == wsum(v[lo:hi])
            assert out.tobytes() == v[lo:hi].tobytes(), (lo, hi)
        assert (big[:10] == -1).all() and (big[v.size + 10:] == -1).all()
        with pytest.raises(ValueError, match="writable contiguous"):
            rd.read_into(arr, np.empty(10, np.float64), 0, 10)


def test_no_digests_no_crc_read_as_before(tmp_path):
    v = values(dtype=np.int64)
    arr = stored(tmp_path, v, "zstd", digests=False, crc=False)
    assert arr.digests() is None
    with ChunkReader(2) as rd:
        got, s = rd.read(arr)
    assert got.tobytes() == v.tobytes() and s == wsum(v)


def test_default_threads():
    assert default_threads() == max(1, min(8, os.cpu_count() or 1))
    with ChunkReader() as rd:
        assert rd.threads == default_threads()


# ---- damage: the same one-line error as a CheckedArray read ----------------------------------------
def _file(root, c):
    return root / "arr" / "c" / str(c)


def _codec(codec):
    return numcodecs.Blosc(cname="zstd", clevel=1, shuffle=numcodecs.Blosc.SHUFFLE) if codec == "blosc" \
        else numcodecs.Zstd(level=1)


def flip(f, codec, dtype):
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0x5A
    f.write_bytes(bytes(b))


def _fresh(f, codec, payload):
    comp = _codec(codec).encode(payload)
    f.write_bytes(comp + struct.pack("<I", crc32c(comp)))


def rewrite_fresh_crc(f, codec, dtype):
    raw = f.read_bytes()
    v = np.frombuffer(_codec(codec).decode(raw[:-4]), dtype).copy()
    v[:3] = v[3:6]
    _fresh(f, codec, v.tobytes())


def wrong_size(f, codec, dtype):
    _fresh(f, codec, np.arange(10, dtype=dtype).tobytes())


def undecodable(f, codec, dtype):
    junk = np.random.default_rng(1).integers(0, 256, 200, dtype=np.uint8).tobytes()
    f.write_bytes(junk + struct.pack("<I", crc32c(junk)))


DAMAGE = {"flip": flip, "rewrite-fresh-crc": rewrite_fresh_crc, "wrong-size": wrong_size,
          "undecodable": undecodable}


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("codec,dtype", [("blosc", np.int32), ("zstd", np.int64)])
def test_damage_is_the_checked_arrays_error(tmp_path, how, codec, dtype):
    v = values(dtype=dtype)
    stored(tmp_path, v, codec)
    DAMAGE[how](_file(tmp_path, 4), codec, dtype)
    with pytest.raises(DbfsError) as want:
        opened(tmp_path)[:]
    for threads in (1, 4):
        with ChunkReader(threads) as rd, pytest.raises(DbfsError) as got:
            rd.read(opened(tmp_path))
        assert str(got.value) == str(want.value), how
        assert "arr chunk 4 (entries 4000..4999) is corrupt" in str(got.value) and "\n" not in str(got.value)
    assert zarr.open_group(str(tmp_path), mode="r").attrs["corrupt"]["chunk"] == 4


def test_a_span_cutting_a_damaged_chunk_checks_it_whole(tmp_path):
    """Entries 4000..4002 rewritten (fresh CRC): a span holding only 4500..5499 still fails chunk 4's digest."""
    v = values()
    stored(tmp_path, v)
    rewrite_fresh_crc(_file(tmp_path, 4), "blosc", np.int32)
    with ChunkReader(2) as rd, pytest.raises(DbfsError, match=r"arr chunk 4 \(entries 4000\.\.4999\).*digest"):
        rd.read_into(opened(tmp_path), np.empty(1_000, np.int32), 4_500, 5_500)


def test_missing_chunk_and_the_lowest_damage_is_named(tmp_path):
    v = values()
    stored(tmp_path, v)
    flip(_file(tmp_path, 9), "blosc", np.int32)
    _file(tmp_path, 6).unlink()
    for threads in (1, 2, 5):
        with ChunkReader(threads) as rd, pytest.raises(DbfsError) as got:
            rd.read(opened(tmp_path))
        assert "arr chunk 6 (entries 6000..6999) is corrupt (missing)" in str(got.value)


def test_missing_chunk_without_digests_reads_the_fill_value_as_zarr(tmp_path):
    v = values()
    stored(tmp_path, v, digests=False)
    _file(tmp_path, 2).unlink()
    with ChunkReader(2) as rd:
        got, _ = rd.read(opened(tmp_path))
    assert got.tobytes() == zarr.open_array(str(tmp_path / "arr"), mode="r")[:].tobytes()
    assert (got[2_000:3_000] == 0).all()


# ---- load_partition and the GPU workers' loader -------------------------------------------------------
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A SCALE 12 dataset with p3-block in chunks of 4096 entries (several per partition)."""
    from dbfs import kernel1, store
    from dbfs.spec import GraphSpec

    root = tmp_path_factory.mktemp("cr")
    ds, _ = store.generate(GraphSpec.make("kronecker", 12), root=root, client=None, quiet=True, chunk_edges=1024)
    v = kernel1.build_partitioned(ds.path, P=3, client=None, progress=False, memory_budget=1 << 17)
    assert v["chunks"]["indices"] == 4096 and min(v["nnz"]) > 4 * 4096
    return ds, v["variant"]


def test_load_partition_is_the_stored_partition(small):
    from dbfs.kernel1 import load_partition

    ds, variant = small
    for rk in range(3):
        part = ds.path / "csr" / variant / f"part-{rk:04d}"
        want_ip = zarr.open_array(str(part / "indptr"), mode="r")[:]
        want_ix = zarr.open_array(str(part / "indices"), mode="r")[:]
        for threads in (1, 3):
            ip, ix, meta = load_partition(ds.path, variant, rk, threads=threads)
            assert ip.tobytes() == want_ip.tobytes() and ix.tobytes() == want_ix.tobytes()
            assert ix.dtype == want_ix.dtype and meta["nnz"] == want_ix.shape[0] and meta["load_time"] > 0


def test_geometry_is_the_host_partitions(small):
    """What a partition read straight to a GPU takes from its metadata is what _Part derives."""
    from dbfs.bfs.dask.layout.worker import _geometry, _load_part
    from dbfs.kernel1 import load_partition

    ds, variant = small
    for rk in range(3):
        p = _load_part(str(ds.path), variant, rk)
        geo = _geometry(load_partition(ds.path, variant, rk)[2])
        assert p.pad > 0 or rk == 0
        for k, val in geo.items():
            if k not in ("load_time", "prepare_time"):
                assert getattr(p, k) == val, (rk, k)


def _host_and_device(path, variant, P, n, slab_bytes, threads):
    from dbfs.bfs.dask.layout.gpu_part import load_device
    from dbfs.bfs.dask.layout.worker import _global_degrees, _load_part, _local_degrees, _prepare_part
    from dbfs.partition import Partitioning

    host = [_load_part(str(path), variant, rk) for rk in range(P)]
    dev = [load_device(str(path), variant, rk, slab_bytes=slab_bytes, threads=threads) for rk in range(P)]
    deg = _global_degrees(Partitioning(n, P, "block"), *[_local_degrees(p) for p in host])
    dev_deg = _global_degrees(Partitioning(n, P, "block"), *[_local_degrees(p) for p in dev])
    assert dev_deg.tobytes() == deg.tobytes()
    return [_prepare_part(p, deg) for p in host], [_prepare_part(g, deg, True) for g in dev]


def _same(hp, gp, cp):
    from dbfs.bfs.dask.layout.gpu_part import _COPIED
    from dbfs.graph import id_dtype

    vdt = np.dtype(id_dtype(hp.n))
    assert gp.on_device and gp.indices.dtype == vdt and gp.hub.dtype == vdt
    assert cp.asnumpy(gp.indices).tobytes() == hp.indices.astype(vdt).tobytes()
    assert cp.asnumpy(gp.indptr).tobytes() == hp.indptr.tobytes() == gp.indptr_host.tobytes()
    assert cp.asnumpy(gp.hub).tobytes() == hp.hub.astype(vdt).tobytes()
    for k in _COPIED:
        if k not in ("load_time", "prepare_time"):
            assert getattr(gp, k) == getattr(hp, k), k


@pytest.mark.gpu
@pytest.mark.parametrize("slab_bytes,threads", [(1, 1), (1, 2), (1 << 27, None)])
def test_device_partition_is_the_host_loaded_one(cp, small, slab_bytes, threads):
    """p3-block (int32 ids): several slabs (one or two chunks each) or one; indices, indptr and the hub table
    built on the device equal the host's bit for bit, and the old path (a _GpuPart made from the host part) too."""
    from dbfs.bfs.dask.layout.gpu_part import _GpuPart

    ds, variant = small
    host, dev = _host_and_device(ds.path, variant, 3, ds.n_vertices, slab_bytes, threads)
    for hp, gp in zip(host, dev):
        _same(hp, gp, cp)
        old = _GpuPart(hp)
        assert cp.asnumpy(old.hub).tobytes() == cp.asnumpy(gp.hub).tobytes()
        assert cp.asnumpy(old.indices).tobytes() == cp.asnumpy(gp.indices).tobytes()


@pytest.mark.gpu
def test_device_partition_of_int64_ids_is_converted_on_the_device(cp, small, tmp_path, monkeypatch):
    """A p1-block variant stored with int64 ids (N < 2**31) in chunks of 4096: int32 on the device, through the
    device staging buffer over several slabs, equal to the host-loaded partition."""
    from dbfs.kernel1 import csr_store, load_csr, store_csr

    ds, variant = small
    g = load_csr(ds.path, variant)
    root = tmp_path / "i64"
    shutil.copytree(ds.path, root / ds.path.name, ignore=shutil.ignore_patterns("csr"))
    monkeypatch.setattr(csr_store, "_MAX_OUT_CHUNK", 4096)
    store_csr(root / ds.path.name, g.indptr, g.indices.astype(np.int64), ds.n_edges, True, 0.0, "test")
    host, dev = _host_and_device(root / ds.path.name, "p1-block", 1, ds.n_vertices, 1, 2)
    assert host[0].indices.dtype == np.int64 and dev[0].indices.dtype == np.int32
    _same(host[0], dev[0], cp)


@pytest.mark.gpu
def test_device_load_of_a_damaged_chunk_is_the_host_loads_error(cp, small, tmp_path):
    from dbfs.bfs.dask.layout.gpu_part import load_device
    from dbfs.kernel1 import load_partition

    ds, variant = small
    root = tmp_path / "bad"
    shutil.copytree(ds.path, root / ds.path.name)
    path = root / ds.path.name
    f = path / "csr" / variant / "part-0001" / "indices" / "c" / "2"
    rewrite_fresh_crc(f, "blosc", np.int32)
    with pytest.raises(DbfsError) as got:
        load_device(str(path), variant, 1, slab_bytes=1, threads=2)
    assert "part-0001/indices chunk 2" in str(got.value) and "digest" in str(got.value)
    del zarr.open_group(str(path / "csr" / variant), mode="r+").attrs["corrupt"]
    with pytest.raises(DbfsError) as want:
        load_partition(path, variant, 1)
    assert str(got.value) == str(want.value)
