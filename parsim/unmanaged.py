"""Arrays without a memory owner, for arrays handed down to helper calls in hot loops.

numba counts references to arrays: each array argument of a call that is not inlined away is
incremented before the call and decremented after it, by an atomic instruction on the array's
memory owner. The narrow phase passed four scratch arrays (normals, points, depths, work) three
calls deep for every pair and carved views out of ``work``: 24 or more atomic updates per
pair, 20-30 % of the samples of the general pair kernel on the demo's 20,000 pairs
(2026-11-28, perf and gdb on the kernel alone); the id maps' per-key deletes likewise. An
array whose owner is NULL costs a test and no atomic (numba's ``NRT_incref`` skips a NULL
owner), and its views inherit the NULL owner. :func:`unmanaged` makes such a copy of an
array's descriptor; the data are the same, so it is only valid while the original array is
alive (a kernel's argument is, for the whole call). Never make one of an array a kernel
creates itself: numba frees a variable after its last use, which may come before the
unmanaged copy's. Used only for arrays passed down to callees: nothing unmanaged is returned
or kept.
"""

from __future__ import annotations

from numba.core import types
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array


@intrinsic
def unmanaged(typingctx, arr):
    """``arr`` (same type, same data) without a memory owner; see the module docstring."""
    if not isinstance(arr, types.Array):
        return None
    sig = arr(arr)

    def codegen(context, builder, signature, args):
        src = make_array(signature.args[0])(context, builder, value=args[0])
        out = make_array(signature.return_type)(context, builder)
        populate_array(out, data=src.data, shape=src.shape, strides=src.strides,
                       itemsize=src.itemsize, meminfo=None)
        return out._getvalue()

    return sig, codegen
