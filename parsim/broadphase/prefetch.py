"""A software prefetch usable in numba kernels: ``prefetch(array, index)``.

Batch kernels that touch one random element of a large array per body (the cell table of a hash
grid of 1e6 bodies is 64 MB) wait for memory once per body. Asking for the element of the body
``D`` places ahead lets those waits overlap. ``llvm.prefetch`` is only a hint: it never faults,
changes no value, and an index past the end is never used here (callers check bounds).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint that ``arr[idx]`` (1-d array, integer index) will be read soon."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(idx, types.Integer):
        return None
    sig = types.void(arr, types.intp)  # numba casts the index (any integer type)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        # declare_intrinsic mangles the name for the pointer mode of the active LLVM
        # (llvm.prefetch.p0i8 with typed pointers, .p0 with opaque ones)
        fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], fnty)
        # read (0), high temporal locality (3), data cache (1)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen
