"""An 8-wide AABB overlap test usable in numba kernels: ``overlap_mask8(...)``; an 8-wide count
of the x indices below a bound, for the windows of short rows: ``count_below8(...)``; and a
16-wide test along x on float32 copies, the filter of sparse grids: ``overlap_x16f(...)``.

The detection step tests one box against short runs of candidate boxes (a few bodies of three
neighbouring cells). Scalar, each candidate costs a loop trip whose exit the branch predictor
misses about half the time, and ~30 instructions. Here eight candidates, stored as six
coordinate arrays (structure of arrays), are compared at once with LLVM vector instructions
(``<8 x double>``: one AVX-512 register, two AVX registers, four SSE registers; LLVM splits the
vector for the CPU it compiles for), and the result is a bit mask. Measured on the reference
scenario's windows (1e5 bodies x 5 windows, ~0.75 candidates each): 2.2 ms against ~4 ms for the
scalar loop (2026-11-27, AMD EPYC, AVX-512).

The caller guarantees that ``index + 7`` is inside every array (pad them with eight boxes that
overlap nothing: lo = +inf, hi = -inf) and masks the lanes past its run's end.

``overlap_mask4`` is the same test of four boxes. Most windows of the reference scenario hold
one to three candidates; testing those four at a time took the detection step from 6.73-6.82 to
6.53-6.58 ms (alternated three times, 2026-11-27, on an AMD EPYC of family 25 model 17, a
Zen 4, which executes a 512-bit compare as two 256-bit halves, so eight lanes cost twice four).
A third, two-wide size was slower (6.51-6.85). The detection takes it only where nearly every
window is that short (see ``run_windows``).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8


def _splat(builder, vt, x):
    """The vector of type ``vt`` with ``x`` in every lane."""
    v = builder.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(ir.IntType(32), 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vt.count), [0] * vt.count)
    return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined), zeros)


def _c_arrays(arrays, dtype=types.float64) -> bool:
    """Whether every one is a C-contiguous 1-d array of ``dtype`` (the lanes are neighbours)."""
    return all(isinstance(a, types.Array) and a.ndim == 1 and a.dtype == dtype
               and a.layout == "C" for a in arrays)


def _overlap_codegen(lanes):
    """The typing and code of an overlap test of ``lanes`` boxes (see :func:`overlap_mask8`)."""

    def typer(typingctx, lx, ly, lz, hx, hy, hz, index, l0, l1, l2, h0, h1, h2):
        arrays = (lx, ly, lz, hx, hy, hz)
        if not _c_arrays(arrays) or not isinstance(index, types.Integer):
            return None
        sig = types.int64(*arrays, types.intp, *([types.float64] * 6))
        return sig, _codegen(lanes, 3)

    typer.__name__ = typer.__qualname__ = f"overlap_mask{lanes}"
    return typer


def _codegen(LANES, axes, element=ir.DoubleType()):
    """Code of the test along the first ``axes`` axes: arguments ``axes`` arrays of lower
    corners, ``axes`` of upper corners, the index, ``axes`` lower and ``axes`` upper bounds
    (float64 elements, or those of ``element``)."""

    def codegen(context, builder, signature, args):
        vt = ir.VectorType(element, LANES)
        align = 8 if isinstance(element, ir.DoubleType) else 4
        vecs = []
        for k in range(2 * axes):
            aryty = signature.args[k]
            ary = context.make_array(aryty)(context, builder, args[k])
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[2 * axes]],
                                           wraparound=False)
            vecs.append(builder.load(builder.bitcast(ptr, vt.as_pointer()), align=align))

        mask = None
        for k in range(axes):
            lo_b, hi_b = vecs[k], vecs[axes + k]
            lo_q, hi_q = args[2 * axes + 1 + k], args[3 * axes + 1 + k]
            c = builder.and_(builder.fcmp_ordered("<=", _splat(builder, vt, lo_q), hi_b),
                             builder.fcmp_ordered("<=", lo_b, _splat(builder, vt, hi_q)))
            mask = c if mask is None else builder.and_(mask, c)
        return builder.zext(builder.bitcast(mask, ir.IntType(LANES)), ir.IntType(64))

    return codegen


def _count_below_typer(typingctx, xs, start, n, t):
    if not (isinstance(xs, types.Array) and xs.ndim == 1 and xs.dtype == types.int32
            and xs.layout == "C"):
        return None
    if not all(isinstance(v, types.Integer) for v in (start, n, t)):
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        vt = ir.VectorType(i32, LANES)
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, signature.args[0], ary, [args[1]],
                                       wraparound=False)
        v = builder.load(builder.bitcast(ptr, vt.as_pointer()), align=4)

        t, n = (context.cast(builder, args[j], signature.args[j], types.int32) for j in (3, 2))
        below = builder.icmp_signed("<", v, _splat(builder, vt, t))
        inside = builder.icmp_signed("<", ir.Constant(vt, list(range(LANES))),
                                     _splat(builder, vt, n))
        bits = builder.bitcast(builder.and_(below, inside), ir.IntType(LANES))
        cnt = builder.call(builder.module.declare_intrinsic("llvm.ctpop", [ir.IntType(LANES)]),
                           [bits])
        return builder.zext(cnt, ir.IntType(64))

    return types.int64(xs, types.intp, types.int64, types.int64), codegen


#: ``count_below8(xs, start, n, t)``: how many of ``xs[start : start + n]`` (n <= 8, int32,
#: C-contiguous; ``xs[start + 7]`` must be inside the array, its lanes past ``n`` are ignored)
#: are below ``t`` (which must fit in int32). In a run sorted by x, ``start + count_below8(...)``
#: is the first entry at or after x = t: the x window of a row of at most eight bodies, from
#: one vector compare.
count_below8 = intrinsic(_count_below_typer)

#: ``overlap_mask8(lx, ly, lz, hx, hy, hz, index, l0, l1, l2, h0, h1, h2)``: bit k set iff box
#: ``index + k`` (``[lx, hx] x [ly, hy] x [lz, hz]``) overlaps the closed box
#: ``[l0, h0] x [l1, h1] x [l2, h2]``; k = 0..7. NaN coordinates never overlap.
overlap_mask8 = intrinsic(_overlap_codegen(8))
#: the same for four boxes (k = 0..3): half the vector work, for the short windows
overlap_mask4 = intrinsic(_overlap_codegen(4))


def _overlap_x_typer(typingctx, lx, hx, index, l0, h0):
    if not _c_arrays((lx, hx)) or not isinstance(index, types.Integer):
        return None
    return types.int64(lx, hx, types.intp, types.float64, types.float64), _codegen(LANES, 1)


#: ``overlap_x8(lx, hx, index, l0, h0)``: bit k set iff ``[lx, hx]`` of box ``index + k``
#: overlaps ``[l0, h0]`` along x alone (k = 0..7): a third of :data:`overlap_mask8`'s work, a
#: filter where few candidates are near in x
overlap_x8 = intrinsic(_overlap_x_typer)


def _overlap_x16f_typer(typingctx, lx, hx, index, l0, h0):
    if not _c_arrays((lx, hx), types.float32) or not isinstance(index, types.Integer):
        return None
    return (types.int64(lx, hx, types.intp, types.float32, types.float32),
            _codegen(16, 1, ir.FloatType()))


#: ``overlap_x16f(lx, hx, index, l0, h0)``: :data:`overlap_x8` on float32 copies of the x
#: bounds, sixteen lanes (k = 0..15) in one vector: a filter before the exact test, for runs of
#: up to sixteen candidates that rarely overlap (a sparse grid). Copies rounded to nearest
#: (``np.float32(v)``, beyond float32's range to +-inf) are enough: rounding is monotone, so
#: ``lo_b <= hi_a`` implies the same of the copies, and a lane this test clears never overlaps.
overlap_x16f = intrinsic(_overlap_x16f_typer)
