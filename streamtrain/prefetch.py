"""``prefetch(arr, i)`` inside compiled code: ask the CPU to start loading element (or row) ``i``
of ``arr`` into its caches, and go on at once. A hash-table probe or a per-example row whose
address is known a few steps ahead then finds its cache line there instead of stalling on it:
the compiled loops over ids or examples issue it for the id or example some places ahead. It
is a hint (LLVM's ``llvm.prefetch``): it never faults, even past an array's end, and changes
no value.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, arr, i):
    """Prefetch ``arr[i]`` (a 1-D array's element, a 2-D array's row) for reading."""
    if not isinstance(arr, types.Array) or not isinstance(i, types.Integer):
        return None
    sig = types.void(arr, i)

    def codegen(context, builder, signature, args):
        aty, ity = signature.args
        ary = context.make_array(aty)(context, builder, args[0])
        index = context.cast(builder, args[1], ity, types.intp)
        stride = builder.extract_value(ary.strides, 0)
        byte = ir.IntType(8)
        base = builder.bitcast(ary.data, byte.as_pointer())
        ptr = builder.gep(base, [builder.mul(index, stride)])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])     # read, keep in all levels, data
        return context.get_dummy_value()
    return sig, codegen
