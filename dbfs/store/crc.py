"""zarr's ``crc32c`` codec, computed without holding the GIL.

Contract
--------
:class:`Crc32cCodec` is zarr's ``crc32c`` bytes-to-bytes codec (zarr v3
core specification, https://zarr-specs.readthedocs.io/en/latest/v3/codecs/
crc32c/index.html): encoding appends the CRC-32C (Castagnoli polynomial,
RFC 3720 appendix B.4) of a chunk's bytes as 4 little-endian bytes;
decoding checks and strips it and raises ``ValueError("Stored and computed
checksum do not match ...")`` on a mismatch. Same metadata
(``{"name": "crc32c"}``) and same bytes as ``zarr.codecs.Crc32cCodec``, so
stores written either way read either way. Importing this module registers
it as zarr's implementation of ``crc32c`` for this process.

Method: zarr's own codec calls ``google_crc32c``, which holds the GIL, on
zarr's event-loop thread, so the CRCs of the chunks that Dask tasks read or
write at once run one at a time. Here each CRC runs in a worker thread (as
zarr runs zstd) and is a Numba ``nogil`` loop over 8-byte words using the
SSE4.2 ``crc32`` instruction (LLVM intrinsic ``llvm.x86.sse42.crc32.64.64``)
where the host CPU has it, else ``google_crc32c`` (with the GIL).
"""
from __future__ import annotations

import asyncio

import google_crc32c
import numpy as np
import zarr
from llvmlite import binding
from zarr.codecs import Crc32cCodec as _ZarrCrc32c
from zarr.registry import register_codec

__all__ = ["Crc32cCodec", "crc32c", "HARDWARE"]


def _host_has_sse42() -> bool:
    try:
        return bool(binding.get_host_cpu_features().get("sse4.2", False))
    except Exception:  # noqa: BLE001 - no llvmlite feature query: use the portable path
        return False


HARDWARE = _host_has_sse42()

if HARDWARE:
    from llvmlite import ir
    from numba import njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def _step64(typingctx, crc, word):
        """One ``crc32`` instruction over 8 bytes (uint64 state)."""
        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, i64]),
                                                "llvm.x86.sse42.crc32.64.64")
            return builder.call(fn, args)
        return types.uint64(types.uint64, types.uint64), codegen

    @intrinsic
    def _step8(typingctx, crc, byte):
        """One ``crc32`` instruction over 1 byte (uint32 state)."""
        def codegen(context, builder, signature, args):
            i32, i8 = ir.IntType(32), ir.IntType(8)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, i8]),
                                                "llvm.x86.sse42.crc32.32.8")
            return builder.call(fn, args)
        return types.uint32(types.uint32, types.uint8), codegen

    @njit(nogil=True, cache=True)
    def _crc_hw(buf):
        n = buf.shape[0]
        n8 = n // 8
        words = buf[:n8 * 8].view(np.uint64)
        c = np.uint64(0xFFFFFFFF)
        for k in range(n8):
            c = _step64(c, words[k])
        c32 = np.uint32(c)
        for i in range(n8 * 8, n):
            c32 = _step8(c32, buf[i])
        return c32 ^ np.uint32(0xFFFFFFFF)

    @njit(nogil=True, cache=True)
    def _append_hw(buf):
        n = buf.shape[0]
        out = np.empty(n + 4, np.uint8)
        out[:n] = buf
        c = _crc_hw(buf)
        for k in range(4):
            out[n + k] = np.uint8((c >> np.uint32(8 * k)) & np.uint32(0xFF))
        return out


def crc32c(buf) -> int:
    """The CRC-32C of a byte buffer.

    Parameters
    ----------
    buf : array_like of uint8, or bytes

    Returns
    -------
    int
        As ``google_crc32c.value(buf)``.
    """
    a = np.frombuffer(buf, np.uint8) if isinstance(buf, (bytes, bytearray, memoryview)) else \
        np.ascontiguousarray(buf).view(np.uint8).ravel()
    if HARDWARE:
        return int(_crc_hw(a))

    return int(google_crc32c.value(a))


class Crc32cCodec(_ZarrCrc32c):
    """zarr's ``crc32c`` codec with the CRC computed off the GIL (see the module docstring)."""

    def _decode_sync(self, chunk_bytes, chunk_spec):
        data = chunk_bytes.as_numpy_array()
        stored = bytes(data[-4:]) if data.shape[0] >= 4 else b""
        inner = data[:-4] if data.shape[0] >= 4 else data[:0]
        computed = np.uint32(crc32c(inner)).astype("<u4").tobytes()
        if computed != stored:
            raise ValueError(f"Stored and computed checksum do not match. Stored: {stored!r}. Computed: {computed!r}.")
        return chunk_spec.prototype.buffer.from_array_like(inner)

    def _encode_sync(self, chunk_bytes, chunk_spec):
        data = np.ascontiguousarray(chunk_bytes.as_numpy_array()).view(np.uint8)
        if HARDWARE:
            out = _append_hw(data)
        else:
            out = np.empty(data.shape[0] + 4, np.uint8)
            out[:-4] = data
            out[-4:] = np.frombuffer(np.uint32(crc32c(data)).astype("<u4").tobytes(), np.uint8)
        return chunk_spec.prototype.buffer.from_array_like(out)

    async def _decode_single(self, chunk_bytes, chunk_spec):
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)

    async def _encode_single(self, chunk_bytes, chunk_spec):
        return await asyncio.to_thread(self._encode_sync, chunk_bytes, chunk_spec)


def _register() -> None:
    """Make :class:`Crc32cCodec` zarr's ``crc32c`` in this process."""
    register_codec("crc32c", Crc32cCodec)
    zarr.config.set({"codecs.crc32c": f"{Crc32cCodec.__module__}.{Crc32cCodec.__qualname__}"})


_register()
