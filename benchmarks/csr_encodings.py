"""Compressed encodings of the sorted CSR (``indices``, ``indptr``), measured in one run (#20 item 2).

What it measures, per SCALE (the CSR of ``dbfs.kronecker_edges(S)`` built by
``dbfs.kernel1.build_csr``: ``indices`` int32, each row ascending; ``indptr``
int64), for each codec chain below on dbfs's stored chunk length (2**21
entries, every chain ending in the crc32c dbfs writes):

- stored bytes (the chunk values of the zarr array: its last chunk is stored
  full length, padded with the fill value) and the ratio stored / raw, and
  bits per entry (``chunk_bytes`` in the record: the data's chunks alone);
- encode and decode throughput in GB/s of raw data, median of ``--repeat``
  calls, in two modes: ``1t``, one thread (the numcodecs codecs that zarr's
  codecs wrap, called chunk by chunk in the main thread, blosc without
  threads, the per-row delta's serial kernel); ``mt``, a real zarr v3 array in
  a ``MemoryStore`` written and read with zarr's codec thread pool (one worker
  per core) and the per-row delta's parallel kernel;
- the ratios of bytes and speeds against plain zstd level 1 (what dbfs writes
  today, :func:`dbfs.store.integrity.compressors`) from the same run.

Every decode is compared with the original array (``np.array_equal``); a
round trip that differs aborts the script before any record is written.

Chains: ``zstd1``/``zstd3`` (bytes -> zstd), ``rowdelta+zstdL`` (per-row
delta, then zstd), ``bitshuf+zstd1``/``shuf+zstd1`` (blosc, cname zstd,
bit- or byte-shuffle), ``rowdelta+bitshuf+zstd1``/``rowdelta+shuf+zstd1``,
``chunkdelta+zstd1`` (numcodecs ``Delta``: a delta over the whole chunk,
row boundaries not reset) and, for ``indptr``, ``delta+zstd1`` (numcodecs
``Delta``; indptr is monotone) and ``delta+bitshuf+zstd1``.

Per-row delta (the encoding of sorted adjacency lists in WebGraph, Boldi and
Vigna, "The WebGraph Framework I: Compression Techniques", WWW 2004, gap
coding; and the delta + bit-shuffle of Masui, bitshuffle, Astronomy and
Computing 12, 2015): ``d[j] = indices[j] - indices[j-1]`` inside a row, and
``d[j] = indices[j]`` at a row start and at every chunk start (so every
stored chunk decodes on its own, given ``indptr``). Rows hold distinct
ascending ids, so every delta is >= 1 and fits the ids' dtype. Decode is the
running sum reset at the same places; both are Numba loops over rows (serial,
and ``prange`` over rows for ``mt``) and both are timed.

    python benchmarks/csr_encodings.py --scales 18 20

Writes ``benchmarks/results/csr_encodings-<UTC stamp>.json``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numba
import numcodecs
import numpy as np
import zarr
from numcodecs import Blosc, Delta, Zstd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import write_record  # noqa: E402
from dbfs import kernel1, kronecker_edges  # noqa: E402
from dbfs.progress import say  # noqa: E402
from dbfs.store.crc import Crc32cCodec, crc32c  # noqa: E402

CHUNK = 1 << 21          # dbfs's zarr chunk length of indices / indptr (dbfs.kernel1.csr_store)
_MASK = CHUNK - 1


# ---------------------------------------------------------------------------- per-row delta
def _rowdelta_enc(x, indptr, out):
    for r in numba.prange(indptr.size - 1):
        s, e = indptr[r], indptr[r + 1]
        if s < e:
            out[s] = x[s]
        for j in range(s + 1, e):
            out[j] = x[j] if (j & _MASK) == 0 else x[j] - x[j - 1]


def _rowdelta_dec(d, indptr, out):
    for r in numba.prange(indptr.size - 1):
        s, e = indptr[r], indptr[r + 1]
        if s < e:
            out[s] = d[s]
        for j in range(s + 1, e):
            out[j] = d[j] if (j & _MASK) == 0 else out[j - 1] + d[j]


_ENC = {False: numba.njit(cache=False)(_rowdelta_enc), True: numba.njit(parallel=True, cache=False)(_rowdelta_enc)}
_DEC = {False: numba.njit(cache=False)(_rowdelta_dec), True: numba.njit(parallel=True, cache=False)(_rowdelta_dec)}


def rowdelta_encode(x, indptr, parallel=False):
    """Per-row delta of ``x`` (rows cut by ``indptr``; raw at row and chunk starts)."""
    out = np.empty_like(x)
    _ENC[parallel](x, indptr, out)
    return out


def rowdelta_decode(d, indptr, parallel=False):
    """Inverse of :func:`rowdelta_encode`."""
    out = np.empty_like(d)
    _DEC[parallel](d, indptr, out)
    return out


# ---------------------------------------------------------------------------- chains
def chains(dtype):
    """(name, array, row delta?, numcodecs filters, numcodecs compressor, zarr filters, zarr compressor)."""
    from zarr.codecs import BloscCodec, ZstdCodec
    from zarr.codecs.numcodecs import Delta as ZDelta

    ds = np.dtype(dtype).str

    def blosc(shuffle, level=1):
        """(numcodecs Blosc, zarr BloscCodec) with the same settings."""
        nc = Blosc(cname="zstd", clevel=level, shuffle={"bit": Blosc.BITSHUFFLE, "byte": Blosc.SHUFFLE}[shuffle])
        zc = BloscCodec(cname="zstd", clevel=level, shuffle={"bit": "bitshuffle", "byte": "shuffle"}[shuffle])
        return nc, zc

    out = []
    for arr in ("indices", "indptr"):
        rows = [(f"zstd{lv}", False, [], Zstd(level=lv), [], ZstdCodec(level=lv)) for lv in (1, 3)]
        rows += [(f"{tag}+zstd1", False, [], *blosc(sh)[:1], [], blosc(sh)[1]) for tag, sh in (("bitshuf", "bit"),
                                                                                             ("shuf", "byte"))]
        if arr == "indices":
            rows += [(f"rowdelta+zstd{lv}", True, [], Zstd(level=lv), [], ZstdCodec(level=lv)) for lv in (1, 3)]
            rows += [("rowdelta+bitshuf+zstd1", True, [], blosc("bit")[0], [], blosc("bit")[1]),
                     ("rowdelta+shuf+zstd1", True, [], blosc("byte")[0], [], blosc("byte")[1]),
                     ("chunkdelta+zstd1", False, [Delta(dtype=ds)], Zstd(level=1), [ZDelta(dtype=ds)],
                      ZstdCodec(level=1))]
        else:
            pd = np.dtype(np.int64).str
            rows += [("delta+zstd1", False, [Delta(dtype=pd)], Zstd(level=1), [ZDelta(dtype=pd)], ZstdCodec(level=1)),
                     ("delta+bitshuf+zstd1", False, [Delta(dtype=pd)], blosc("bit")[0], [ZDelta(dtype=pd)],
                      blosc("bit")[1])]
        out += [(name, arr, *rest) for name, *rest in rows]
    return out


# ---------------------------------------------------------------------------- one thread: codecs chunk by chunk
def enc_1t(x, indptr, rowdelta, filters, comp):
    y = rowdelta_encode(x, indptr) if rowdelta else x
    chunks = []
    for s in range(0, y.size, CHUNK):
        buf = y[s:s + CHUNK]
        for f in filters:
            buf = f.encode(buf)
        c = bytes(comp.encode(buf))
        chunks.append((c, crc32c(c)))
    return chunks


def dec_1t(chunks, dtype, n, indptr, rowdelta, filters, comp):
    y = np.empty(n, dtype)
    s = 0
    for c, crc in chunks:
        if crc32c(c) != crc:
            raise SystemExit("crc32c mismatch in a decoded chunk")
        buf = np.frombuffer(comp.decode(c), dtype)
        for f in reversed(filters):
            buf = f.decode(buf)
        y[s:s + buf.size] = buf
        s += buf.size
    return rowdelta_decode(y, indptr) if rowdelta else y


# ---------------------------------------------------------------------------- threads: a zarr v3 array
def enc_mt(x, indptr, rowdelta, zfilters, zcomp):
    y = rowdelta_encode(x, indptr, parallel=True) if rowdelta else x
    store = zarr.storage.MemoryStore()
    z = zarr.create_array(store, shape=y.shape, chunks=(CHUNK,), dtype=y.dtype, filters=zfilters,
                          compressors=[zcomp, Crc32cCodec()], fill_value=0)
    z[:] = y
    return store, z


def dec_mt(z, indptr, rowdelta):
    y = z[:]
    return rowdelta_decode(y, indptr, parallel=True) if rowdelta else y


def stored_bytes(store):
    return sum(len(v) for k, v in store._store_dict.items() if not k.endswith("zarr.json"))


def check(got, want, what):
    if got.dtype != want.dtype or not np.array_equal(got, want):
        raise SystemExit(f"round trip FAILED for {what}: decoded array differs from the original; aborting")


def timed(fn, repeat, verify=None):
    """(median seconds, all seconds, last result); ``verify(result)`` after each call, outside the timing."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        if verify is not None:
            verify(out)
    return sorted(times)[len(times) // 2], times, out


def measure(name, arrname, x, indptr, rowdelta, filters, comp, zfilters, zcomp, repeat):
    raw = x.nbytes
    label = f"{arrname} {name}"
    if not rowdelta:                                       # warm-up, untimed: zarr's loop and pool, codec contexts
        head = x[:2 * CHUNK]
        check(dec_1t(enc_1t(head, indptr, False, filters, comp), x.dtype, head.size, indptr, False, filters, comp),
              head, label + " (warm-up)")
        check(dec_mt(enc_mt(head, indptr, False, zfilters, zcomp)[1], indptr, False), head, label + " (warm-up)")
    t_e1, all_e1, chunks = timed(lambda: enc_1t(x, indptr, rowdelta, filters, comp), repeat)
    chunk_bytes = sum(len(c) + 4 for c, _ in chunks)
    t_d1, all_d1, _ = timed(lambda: dec_1t(chunks, x.dtype, x.size, indptr, rowdelta, filters, comp), repeat,
                            lambda y: check(y, x, label + " (1t)"))
    t_em, all_em, (store, z) = timed(lambda: enc_mt(x, indptr, rowdelta, zfilters, zcomp), repeat)
    nbytes = stored_bytes(store)
    t_dm, all_dm, _ = timed(lambda: dec_mt(z, indptr, rowdelta), repeat, lambda y: check(y, x, label + " (mt)"))
    g = lambda t: raw / t / 1e9  # noqa: E731
    return {"array": arrname, "chain": name, "raw_bytes": raw, "bytes": nbytes, "chunk_bytes": chunk_bytes,
            "fraction": nbytes / raw, "bits_per_entry": 8 * nbytes / x.size,
            "enc_gbs_1t": g(t_e1), "dec_gbs_1t": g(t_d1), "enc_gbs_mt": g(t_em), "dec_gbs_mt": g(t_dm),
            "seconds": {"enc_1t": all_e1, "dec_1t": all_d1, "enc_mt": all_em, "dec_mt": all_dm}}


def one_scale(scale, repeat):
    say(f"SCALE {scale}: generating and building the CSR")
    n = 1 << scale
    g = kernel1.build_csr(kronecker_edges(scale), n_vertices=n)
    indices, indptr = np.ascontiguousarray(g.indices), np.ascontiguousarray(g.indptr)
    say(f"SCALE {scale}: nnz {indices.size} ({indices.dtype}), indptr {indptr.size} ({indptr.dtype})")
    rowdelta_decode(rowdelta_encode(indices[:CHUNK + 5], indptr[:2]), indptr[:2])            # JIT warm-up
    for par in (False, True):
        check(rowdelta_decode(rowdelta_encode(indices, indptr, par), indptr, par), indices, f"rowdelta par={par}")
    gaps = rowdelta_encode(indices, indptr).astype(np.float64)
    log2_gap = float(np.mean(np.log2(gaps + 1.0)))        # codec-independent: bits of a gap, row starts raw
    del gaps
    say(f"SCALE {scale}: mean log2(gap + 1) of the per-row delta {log2_gap:.2f} bits")
    rows = []
    for name, arrname, rowdelta, filters, comp, zfilters, zcomp in chains(indices.dtype):
        x = indices if arrname == "indices" else indptr
        r = measure(name, arrname, x, indptr, rowdelta, filters, comp, zfilters, zcomp, repeat)
        rows.append(r)
        print(f"SCALE {scale} {arrname:7s} {name:24s} {r['bytes'] / 2**20:9.2f} MiB  {r['fraction']:6.3f} raw  "
              f"{r['bits_per_entry']:5.2f} b/entry  enc {r['enc_gbs_1t']:6.3f}/{r['enc_gbs_mt']:6.3f}  "
              f"dec {r['dec_gbs_1t']:6.3f}/{r['dec_gbs_mt']:6.3f} GB/s (1t/mt)", flush=True)
    for r in rows:
        base = next(b for b in rows if b["array"] == r["array"] and b["chain"] == "zstd1")
        r["vs_zstd1"] = {"bytes": r["bytes"] / base["bytes"],
                         **{k: r[k] / base[k] for k in ("enc_gbs_1t", "dec_gbs_1t", "enc_gbs_mt", "dec_gbs_mt")}}
    return {"scale": scale, "n_vertices": n, "nnz": int(indices.size), "indices_dtype": str(indices.dtype),
            "chunk": CHUNK, "mean_log2_gap_plus_1": log2_gap, "rows": rows}


def print_table(run):
    print(f"\nSCALE {run['scale']}  nnz {run['nnz']}  mean log2(gap+1) {run['mean_log2_gap_plus_1']:.2f}  "
          "(GB/s of raw data, median; x = ratio to zstd1 of the same array in this run)")
    print(f"{'array':7s} {'chain':24s} {'bytes/raw':>9s} {'b/entry':>7s} {'x bytes':>7s} "
          f"{'enc 1t':>7s} {'dec 1t':>7s} {'enc mt':>7s} {'dec mt':>7s} {'x dec1t':>7s} {'x decmt':>7s}")
    for r in run["rows"]:
        v = r["vs_zstd1"]
        print(f"{r['array']:7s} {r['chain']:24s} {r['fraction']:9.3f} {r['bits_per_entry']:7.2f} "
              f"{v['bytes']:7.3f} {r['enc_gbs_1t']:7.3f} {r['dec_gbs_1t']:7.3f} {r['enc_gbs_mt']:7.3f} "
              f"{r['dec_gbs_mt']:7.3f} {v['dec_gbs_1t']:7.2f} {v['dec_gbs_mt']:7.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[18, 20])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tag", default="", help="a label put into the record's file name")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message=".*not in the Zarr version 3 specification.*")
    numcodecs.blosc.use_threads = False
    cores = os.cpu_count() or 1
    zarr.config.set({"threading.max_workers": cores})
    runs = [one_scale(s, args.repeat) for s in args.scales]
    for run in runs:
        print_table(run)
    threads = {"cores": cores, "zarr_max_workers": cores, "numba_threads": numba.get_num_threads(),
               "blosc_use_threads": False}
    kind = "csr_encodings" + (f"-{args.tag}" if args.tag else "")
    write_record(kind, {"args": vars(args), "threads": threads, "runs": runs})


if __name__ == "__main__":
    main()
