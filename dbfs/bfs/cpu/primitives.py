"""Compiled primitives of the CPU BFS steps: bit scans, an atomic OR, a
prefetch hint, and the chunking constants the parallel steps share.

Contract (all callable from Numba-compiled code):

- ``_cttz(x)``: trailing zeros of a non-zero int64; ``_popcount(x)``: its
  set bits. Each is one LLVM instruction (``cttz``, ``ctpop``).
- ``atomic_or(arr, i, val)``: ``old = arr[i]; arr[i] |= val`` as one atomic
  instruction, returns ``old``; for int64 bitmaps shared by the threads of a
  ``prange``. Numba offers no compare-and-swap: this is the only atomic the
  steps use.
- ``prefetch(arr, i)``: a cache hint for ``arr[i]``; never changes a result
  (:mod:`dbfs.prefetch`, where validation reaches it too).
- ``_set_lanes(pv, lanes, count)``: ``pv[b] = -1`` for the set bits ``b <
  count`` of one 64-vertex word (``pv`` the word's slice of a parent array).
- ``num_threads()`` (Python): Numba's thread count, the number of ranges a
  parallel reduction splits its work into; ``_cap(cap)`` maps an optional
  degree-sum cap to an int (``_NO_CAP``: none).

Method: Numba ``@intrinsic`` functions emitting LLVM ``cttz``/``ctpop``,
``atomicrmw or`` (monotonic ordering) and ``llvm.prefetch`` (read, high
locality), as GAP's ``bitmap.h``/``platform_atomics.h`` wrap the compiler
builtins.

Encoding: a bitmap is an int64 array, vertex ``v`` is bit ``v & 63`` of word
``v >> 6``.
"""
from __future__ import annotations

import numba
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from dbfs.prefetch import prefetch  # noqa: F401  (re-exported: the steps import it from here)


@intrinsic
def _cttz(typingctx, x):
    """Count trailing zeros of an int64 (LLVM cttz; x != 0)."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen


@intrinsic
def _popcount(typingctx, x):
    """Set bits of an int64 (LLVM ctpop: one instruction)."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


@intrinsic
def atomic_or(typingctx, arr, idx, val):
    """``old = arr[idx]; arr[idx] |= val`` as one atomic instruction.

    LLVM ``atomicrmw or`` with monotonic ordering; for int64 arrays (bitmaps)
    shared between the threads of a ``prange``. Compiled code only.

    Parameters
    ----------
    arr : ndarray of int64
        The shared words.
    idx : int64
        Word index.
    val : int64
        Bits to set.

    Returns
    -------
    int64
        The word before the OR (``old & val`` tells whether this call set
        the bits).
    """
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64):
        return None
    sig = types.int64(arr, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        return builder.atomic_rmw("or", ptr, args[2], "monotonic")

    return sig, codegen


@njit(nogil=True, cache=True, inline="always")
def _set_lanes(pv, lanes, count):
    """``pv[b] = -1`` for the set bits b < count of ``lanes`` (masked stores)."""
    for b in range(count):
        if (lanes >> b) & 1:
            pv[b] = -1


_NO_CAP = 1 << 62     # a cap no degree sum reaches


def _cap(cap) -> int:
    """``cap`` (None: none) as the int a degree-sum kernel takes."""
    return _NO_CAP if cap is None or cap >= _NO_CAP else max(int(cap), 0)


# a cap on the number of work chunks of one parallel step (top-down claims,
# bitmap_to_queue)
_MAX_CHUNKS = 1024


def num_threads() -> int:
    """Numba's thread count.

    Returns
    -------
    int
        :func:`numba.get_num_threads`: the number of ranges a parallel
        degree sum splits its work into.
    """
    return numba.get_num_threads()
