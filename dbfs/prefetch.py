"""A prefetch hint for Numba-compiled kernels of any stage.

Contract: ``prefetch(arr, i)`` (callable from Numba-compiled code only) asks
the CPU to bring ``arr[i]`` (a flat element index into any array; never
bounds-checked, a prefetch never faults) into cache, and never changes a
result. For independent random reads known some iterations ahead (the rows
a Kernel 2 step or a validation pass will read for the edges after the
current one): their cache misses then overlap instead of waiting one behind
the other.

Method: a Numba ``@intrinsic`` emitting LLVM ``llvm.prefetch`` (read, high
locality, data cache), as GAP's kernels use ``__builtin_prefetch``.

Encoding: none (a hint).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch"]


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint the CPU to fetch ``arr[idx]`` into cache; no effect on results.

    LLVM ``llvm.prefetch`` (read, high locality). For independent random rows
    read soon after: their misses then overlap. Compiled code only.

    Parameters
    ----------
    arr : ndarray
        Any array.
    idx : int64
        Element index (not bounds-checked; a prefetch never faults).
    """
    if not isinstance(arr, types.Array):
        return None
    sig = types.void(arr, types.int64)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]])
        i32 = ir.IntType(32)
        if getattr(ptr.type, "is_opaque", False):
            name = "llvm.prefetch.p0"
        else:                                   # typed pointers (older LLVM)
            ptr = builder.bitcast(ptr, ir.IntType(8).as_pointer())
            name = "llvm.prefetch.p0i8"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]),
                                            name)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen
