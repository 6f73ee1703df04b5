#!/usr/bin/env python3
"""Cost of the HHG detection step's neighbour-cell lookups: wrap arithmetic vs stored offsets.

Schornbaum (2009), section 3.1, gives every cell a pointer to a neighbour-offset array: inner
cells share one grid-global array of 27 linear offsets, each outer (border) cell owns a private
one; the memory is eq. 3.1.2, ``m = xyz * bytes_pointer + [1 + n(x, y, z)] * bytes_offset_array``
with ``n`` the outer cells (eq. 3.1.1a). parsim stores nothing per cell and computes neighbour
indices by wrap arithmetic on the axis indices (``_index_s`` in
``parsim/broadphase/hashgrid_kernels.py``). Strategies compared, on the same cells:

``wrap``    parsim's way until 2026-11-23: split the cell index into ix, iy, iz (shifts, masks), add each of the
            13 half-neighbour offsets, wrap with the masks, recombine;
``thesis``  int32 "offset array id" per cell (0 = the shared array of the inner cells), one
            private 27 x int32 offset array per outer cell, ``cells[c + offs[oid[c], j]]``;
``hybrid``  inner cells use the shared linear offsets, border cells wrap (no per-cell memory).

Two extra wrap variants (no memory either) show where wrap's time goes: ``wrap`` passes the 13
offsets as a runtime array, so every neighbour loads three offsets; ``wrap-const`` reads them
from a module-level array, which numba freezes into constants (the loop unrolls), and
``wrap-rows`` also wraps y and z once per neighbour row (4 rows of 3 cells plus the +x cell).
``wrap-rows`` is what parsim's detection step did from 2026-11-23 to 2026-11-27; since then
it reaches neighbours through rows of cells sorted by x (:mod:`parsim.broadphase.hashgrid_detect`),
and these lookups remain those of the queries and cell edits.

Data: a real ``HierarchicalHashGrid`` holding N unit boxes uniform in a cube sized for about
two overlapping pairs per body (one grid). The timed loop is, for every occupied cell in
sorted cell order, "look up the 13 half neighbours in ``cells`` and count the occupied ones";
the three counts must agree with each other and with a numpy reference. Repetitions are
interleaved (the order rotates every round), timed with ``time.process_time`` (CPU time of this
single-threaded process: time spent descheduled on the shared machine does not count); each
sample repeats the kernel until it takes >= ``--min-sample`` s. Reported: median ns per occupied
cell and the median over rounds of the per-round ratio to ``wrap``.

Usage (from the repository root)::

    export NUMBA_CACHE_DIR=/tmp/numba_nb
    python scripts/bench_hhg_neighbours.py            # N = 1e4, 1e5, 1e6; writes docs/benchmarks/
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
import time

import numpy as np
from numba import njit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from parsim.broadphase import HierarchicalHashGrid  # noqa: E402
from parsim.broadphase import hashgrid_kernels as K  # noqa: E402

# the 27 neighbour offsets in (dz, dy, dx) lexicographic order: index 13 is the cell itself,
# 14..26 are the 13 "half" neighbours (those a cell-by-cell detection visits)
OFF27 = np.array([(dx, dy, dz) for dz in (-1, 0, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1)],
                 dtype=np.int64)
HALF = np.ascontiguousarray(OFF27[14:])
H0 = 14
OFFSET_ARRAY_BYTES = 27 * 4  # thesis: 27 int32 offsets = 108 bytes
STRATEGIES = ("wrap", "thesis", "hybrid", "wrap-const", "wrap-rows")
# (module-level arrays are frozen into the kernels as constants at compile time)


# ------------------------------------------------------------------------------------------
# kernels
# ------------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _wrap(ix, iy, iz, bx, by, mx, my, mz):
    """Copy of parsim's ``_index_s``: linear index of wrapped axis indices."""
    return (ix & mx) | ((iy & my) << bx) | ((iz & mz) << (bx + by))


@njit(cache=True)
def count_wrap(occ, cells, bits, half, reps):
    """Occupied half neighbours of every cell of ``occ``, by wrap arithmetic (parsim)."""
    bx = bits[0]
    by = bits[1]
    mx = (np.int64(1) << bx) - 1
    my = (np.int64(1) << by) - 1
    mz = (np.int64(1) << bits[2]) - 1
    cnt = 0
    for _ in range(reps):
        for i in range(occ.shape[0]):
            c = occ[i]
            ix = c & mx
            iy = (c >> bx) & my
            iz = c >> (bx + by)
            for o in range(half.shape[0]):
                v = cells[_wrap(ix + half[o, 0], iy + half[o, 1], iz + half[o, 2],
                                bx, by, mx, my, mz)]
                cnt += v >= 0
    return cnt


@njit(cache=True)
def count_wrap_const(occ, cells, bits, reps):
    """``count_wrap`` with the offsets as compile-time constants (global ``HALF``)."""
    bx = bits[0]
    by = bits[1]
    mx = (np.int64(1) << bx) - 1
    my = (np.int64(1) << by) - 1
    mz = (np.int64(1) << bits[2]) - 1
    cnt = 0
    for _ in range(reps):
        for i in range(occ.shape[0]):
            c = occ[i]
            ix = c & mx
            iy = (c >> bx) & my
            iz = c >> (bx + by)
            for o in range(13):
                v = cells[_wrap(ix + HALF[o, 0], iy + HALF[o, 1], iz + HALF[o, 2],
                                bx, by, mx, my, mz)]
                cnt += v >= 0
    return cnt


@njit(cache=True)
def count_wrap_rows(occ, cells, bits, reps):
    """Wrap per neighbour row: (dz, dy) in (0, 1), (1, -1), (1, 0), (1, 1) x dx in -1..1, + (0, 0, 1)."""
    bx = bits[0]
    by = bits[1]
    mx = (np.int64(1) << bx) - 1
    my = (np.int64(1) << by) - 1
    mz = (np.int64(1) << bits[2]) - 1
    cnt = 0
    for _ in range(reps):
        for i in range(occ.shape[0]):
            c = occ[i]
            ix = c & mx
            iy = (c >> bx) & my
            iz = c >> (bx + by)
            xm = (ix - 1) & mx
            xp = (ix + 1) & mx
            cnt += cells[c - ix + xp] >= 0
            for dz in range(2):
                zz = ((iz + dz) & mz) << (bx + by)
                for dy in range(-1, 2):
                    if dz == 0 and dy < 1:
                        continue
                    r = zz | (((iy + dy) & my) << bx)
                    cnt += (cells[r | xm] >= 0) + (cells[r | ix] >= 0) + (cells[r | xp] >= 0)
    return cnt


@njit(cache=True)
def build_thesis(bits):
    """Thesis 3.1: int32 offset-array id per cell (0: shared inner array) + 27 x int32 arrays.

    Outer-cell offsets are computed with Python-semantics ``%`` (not the masks of ``_wrap``), so
    the count check compares two independent neighbour computations.
    """
    nx = np.int64(1) << bits[0]
    ny = np.int64(1) << bits[1]
    nz = np.int64(1) << bits[2]
    n_cells = nx * ny * nz
    n_outer = 2 * nx * ny + 2 * ny * (nz - 2) + 2 * (nx - 2) * (nz - 2)  # eq. 3.1.1a
    oid = np.zeros(n_cells, dtype=np.int32)
    offs = np.empty((1 + n_outer, 27), dtype=np.int32)
    for j in range(27):
        offs[0, j] = OFF27[j, 0] + OFF27[j, 1] * nx + OFF27[j, 2] * nx * ny
    k = 1
    for iz in range(nz):
        for iy in range(ny):
            for ix in range(nx):
                if 0 < ix < nx - 1 and 0 < iy < ny - 1 and 0 < iz < nz - 1:
                    continue
                c = ix + nx * (iy + ny * iz)
                oid[c] = k
                for j in range(27):
                    jx = (ix + OFF27[j, 0]) % nx
                    jy = (iy + OFF27[j, 1]) % ny
                    jz = (iz + OFF27[j, 2]) % nz
                    offs[k, j] = jx + nx * (jy + ny * jz) - c
                k += 1
    return oid, offs, k - 1



@njit(cache=True)
def count_thesis(occ, cells, oid, offs, reps):
    """Same count through the per-cell offset-array id and the (shared or private) arrays."""
    cnt = 0
    for _ in range(reps):
        for i in range(occ.shape[0]):
            c = occ[i]
            o = oid[c]
            for j in range(H0, 27):
                v = cells[c + offs[o, j]]
                cnt += v >= 0
    return cnt


@njit(cache=True)
def count_hybrid(occ, cells, bits, shared, half, reps):
    """Shared linear offsets for inner cells, wrap arithmetic for border cells."""
    bx = bits[0]
    by = bits[1]
    mx = (np.int64(1) << bx) - 1
    my = (np.int64(1) << by) - 1
    mz = (np.int64(1) << bits[2]) - 1
    cnt = 0
    for _ in range(reps):
        for i in range(occ.shape[0]):
            c = occ[i]
            ix = c & mx
            iy = (c >> bx) & my
            iz = c >> (bx + by)
            if 0 < ix < mx and 0 < iy < my and 0 < iz < mz:
                for j in range(H0, 27):
                    v = cells[c + shared[j]]
                    cnt += v >= 0
            else:
                for o in range(half.shape[0]):
                    v = cells[_wrap(ix + half[o, 0], iy + half[o, 1], iz + half[o, 2],
                                    bx, by, mx, my, mz)]
                    cnt += v >= 0
    return cnt


# ------------------------------------------------------------------------------------------
# data, reference, timing
# ------------------------------------------------------------------------------------------

def make_grid(n: int, seed: int, ppb: float = 2.0):
    """HHG with n unit boxes uniform in [0, L)^3, L^3 = n * 8 / (2 ppb) (pairs ~ ppb * n)."""
    rng = np.random.default_rng(seed)
    L = (n * 8.0 / (2.0 * ppb)) ** (1.0 / 3.0)
    c = rng.random((n, 3)) * L
    hg = HierarchicalHashGrid()
    hg.add(np.arange(n, dtype=np.int64), c - 0.5, c + 0.5)
    assert hg.active and int(hg._G.n[0]) == 1, "expected exactly one grid"
    return hg, L


def reference_count(occ, cells, bits) -> int:
    """numpy reference: occupied half neighbours with modulo wrap."""
    nx, ny, nz = (1 << int(b) for b in bits)
    ix, iy, iz = occ % nx, (occ // nx) % ny, occ // (nx * ny)
    tot = 0
    for dx, dy, dz in HALF:
        j = (ix + dx) % nx + nx * ((iy + dy) % ny + ny * ((iz + dz) % nz))
        tot += int((cells[j] >= 0).sum())
    return tot


def n_outer(x: int, y: int, z: int) -> int:
    """Thesis eq. 3.1.1a."""
    return 2 * x * y + 2 * y * (z - 2) + 2 * (x - 2) * (z - 2)


def run_size(n: int, args) -> dict:
    t0 = time.perf_counter()
    hg, L = make_grid(n, args.seed)
    t_build = time.perf_counter() - t0
    pairs = len(hg.pairs())
    C, G = hg._C, hg._G
    cells = hg._cells
    bits = G.bits[0].astype(np.int64).copy()
    occ = np.sort(C.row[: C.n[0], K.C_CELL].astype(np.int64))
    assert int(G.base[0]) == 0
    dims = [1 << int(b) for b in bits]
    n_cells = dims[0] * dims[1] * dims[2]

    t0 = time.perf_counter()
    oid, offs, k_outer = build_thesis(bits)
    t_setup_thesis = time.perf_counter() - t0
    assert k_outer == n_outer(*dims)
    shared = offs[0].astype(np.int64)  # hybrid: the thesis' inner-cell array, no per-cell ids
    mx, my, mz = (d - 1 for d in dims)
    ix, iy, iz = occ & mx, (occ >> bits[0]) & my, occ >> (bits[0] + bits[1])
    border = float(np.mean(~((ix > 0) & (ix < mx) & (iy > 0) & (iy < my) & (iz > 0) & (iz < mz))))

    calls = {
        "wrap": lambda r: count_wrap(occ, cells, bits, HALF, r),
        "thesis": lambda r: count_thesis(occ, cells, oid, offs, r),
        "hybrid": lambda r: count_hybrid(occ, cells, bits, shared, HALF, r),
        "wrap-const": lambda r: count_wrap_const(occ, cells, bits, r),
        "wrap-rows": lambda r: count_wrap_rows(occ, cells, bits, r),
    }
    ref = reference_count(occ, cells, bits)
    counts = {s: int(f(1)) for s, f in calls.items()}  # also warms caches
    assert all(v == ref for v in counts.values()), (counts, ref)

    # inner repetitions so that one sample takes >= min_sample
    t0 = time.process_time()
    calls["wrap"](1)
    t1 = max(time.process_time() - t0, 1e-6)
    reps = max(1, int(np.ceil(args.min_sample / t1)))
    samples = {s: [] for s in STRATEGIES}
    for r in range(args.rounds):
        k = r % len(STRATEGIES)
        order = STRATEGIES[k:] + STRATEGIES[:k]
        for s in order:
            t0 = time.process_time()
            got = calls[s](reps)
            samples[s].append(time.process_time() - t0)
            assert got == ref * reps
    t = {s: np.array(v) for s, v in samples.items()}
    ratio = {s: t[s] / t["wrap"] for s in STRATEGIES}  # per round: same noise for all
    per_cell = occ.shape[0] * reps
    thesis_bytes = n_cells * 4 + (1 + k_outer) * OFFSET_ARRAY_BYTES  # eq. 3.1.2, int32 ids
    mem = {s: 0 for s in STRATEGIES}
    mem.update(thesis=thesis_bytes, hybrid=OFFSET_ARRAY_BYTES)
    # context: the whole detection step (hg.pairs(), Algorithm 4) per occupied cell
    t_pairs = []
    for _ in range(3):
        t0 = time.process_time()
        hg.pairs()
        t_pairs.append(time.process_time() - t0)
    return dict(
        n=n, L=L, dims=dims, n_cells=n_cells, occupied=int(occ.shape[0]), outer=k_outer,
        border_frac=border, pairs_per_body=pairs / n, lookups=ref, reps=reps,
        t_build=t_build, t_setup_thesis=t_setup_thesis, hhg_bytes=hg._nbytes(),
        ns_cell={s: float(np.median(t[s])) / per_cell * 1e9 for s in STRATEGIES},
        ratio={s: float(np.median(ratio[s])) for s in STRATEGIES},
        ratio_q={s: (float(np.percentile(ratio[s], 25)), float(np.percentile(ratio[s], 75)))
                 for s in STRATEGIES},
        mem=mem, ns_pairs_cell=float(np.median(t_pairs)) / occ.shape[0] * 1e9,
    )


# ------------------------------------------------------------------------------------------
# output
# ------------------------------------------------------------------------------------------

def machine() -> dict:
    fields = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=20).stdout
        for line in out.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k.strip()] = v.strip()
    except Exception:  # noqa: BLE001 - informational only
        pass
    import numba
    return {
        "cpu": fields.get("Model name", platform.processor() or "unknown"),
        "cores": fields.get("CPU(s)", str(os.cpu_count())),
        "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": "%.2f %.2f %.2f" % os.getloadavg(),
        "vec_note": ("\nnumba (LLVM) auto-vectorises these loops for the host CPU; on this "
                     "AVX-512 machine several of them become gather instructions, so the ratios, "
                     "and the extra wrap variants in particular, are CPU- and compiler-specific."
                     if "avx512f" in fields.get("Flags", "").split() else ""),
    }


def fmt_bytes(b: float) -> str:
    if b == 0:
        return "0"
    if b < 0.01:
        return f"{b:.1e}"
    return f"{b:.3g}"


HEADERS = ["N", "grid", "occupied cells", "border %", "strategy", "ns / occ. cell",
           "ratio to wrap [IQR]", "extra B / cell", "extra B / body"]


def table_rows(res: list[dict]) -> list[list[str]]:
    rows = []
    for r in res:
        for s in STRATEGIES:
            q = r["ratio_q"][s]
            rows.append([
                _nlabel(r["n"]), "x".join(map(str, r["dims"])),
                f"{r['occupied']:,}", f"{100 * r['border_frac']:.1f}", s,
                f"{r['ns_cell'][s]:.1f}",
                "1" if s == "wrap" else f"{r['ratio'][s]:.3f} [{q[0]:.3f}-{q[1]:.3f}]",
                fmt_bytes(r["mem"][s] / r["n_cells"]), fmt_bytes(r["mem"][s] / r["n"]),
            ])
    return rows


def text_table(rows) -> str:
    w = [max(len(x) for x in col) for col in zip(HEADERS, *rows)]
    line = lambda c: "  ".join(x.rjust(w[i]) for i, x in enumerate(c))  # noqa: E731
    return "\n".join([line(HEADERS), line(["-" * x for x in w])] + [line(r) for r in rows])


def md_table(rows) -> str:
    out = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _nlabel(n: int) -> str:
    return f"{n:.0e}".replace("e+0", "e")


def conclusion(res: list[dict]) -> str:
    """One paragraph, numbers from ``res`` (ratios are times relative to wrap: < 1 is faster)."""
    ns = " / ".join(_nlabel(r["n"]) for r in res)

    def across(s):
        return " / ".join(f"{r['ratio'][s]:.2f}x" for r in res)

    big = res[-1]
    best = min(("wrap", "thesis", "hybrid"), key=lambda s: big["ratio"][s])
    m = big["mem"]["thesis"]
    saved = big["ns_cell"]["wrap"] - big["ns_cell"][best]
    return (
        f"Times relative to parsim's wrap arithmetic at N = {ns}: the thesis' stored offsets "
        f"(per-cell offset-array id + private arrays for outer cells) take {across('thesis')} "
        f"the time, the hybrid (shared linear offsets for inner cells, wrap for border cells) "
        f"{across('hybrid')}; at N = {_nlabel(big['n'])} the fastest of the three is **{best}** "
        f"({1 / big['ratio'][best]:.2f}x faster than wrap"
        + (")" if best == "wrap" else
           f", {saved:.1f} ns per occupied cell, {100 * saved / big['ns_pairs_cell']:.1f} % of the "
           f"{big['ns_pairs_cell']:.0f} ns per occupied cell of the whole detection step "
           f"`pairs()`)")
        + f". The thesis scheme costs, by eq. 3.1.2 with int32 ids and 108-byte arrays, "
        f"{m / big['n_cells']:.2f} B per cell, i.e. {m / big['n']:.0f} B per body at N = "
        f"{_nlabel(big['n'])} ({m / 2**20:.0f} MiB, next to {big['hhg_bytes'] / big['n']:.0f} B "
        f"per body for the whole HHG today) plus {big['t_setup_thesis'] * 1e3:.0f} ms of set-up "
        f"at every grid creation or growth, and its per-cell id array is one more stream through "
        f"memory; wrap and hybrid add nothing per cell (the hybrid one 108-byte array per grid). "
        + ("Most of wrap's cost is not the arithmetic but parsim's runtime offset table: with"
           if big["ratio"]["wrap-const"] < 0.8 else "With")
        + f" the 13 offsets as compile-time constants wrap takes {across('wrap-const')}, and "
        f"wrapping once per neighbour row {across('wrap-rows')} the time of parsim's loop, "
        f"still with no per-cell memory."
    )


def write_md(path, res, info, cmd, concl, rows, args):
    notes = "\n".join(
        f"- N = {_nlabel(r['n'])}: domain {r['L']:.1f}^3, {r['pairs_per_body']:.2f} overlapping pairs "
        f"per body, grid {'x'.join(map(str, r['dims']))} ({r['n_cells']:,} cells, "
        f"{r['outer']:,} outer by eq. 3.1.1a), {r['occupied']:,} occupied cells "
        f"({r['border_frac'] * 100:.1f} % of them on the grid border), {r['lookups']:,} occupied "
        f"half neighbours found by every strategy, {r['reps']} kernel call(s) per sample; the "
        f"whole detection step `hg.pairs()` takes {r['ns_pairs_cell']:.0f} ns per occupied cell"
        for r in res)
    text = f"""# HHG neighbour lookups: wrap arithmetic vs stored offset arrays

Generated by `scripts/bench_hhg_neighbours.py` (see its docstring for the method).

Question: parsim's hierarchical hash grid computes neighbour cells by wrap arithmetic on the
axis indices instead of storing, as Schornbaum (2009, section 3.1) does, an offset-array pointer
per cell (one shared array for inner cells, a private one per outer cell). What does each choice
cost in the detection step's neighbour lookups, in time and memory?

Loop timed: for every occupied cell, in cell order, look up the 13 half neighbours in the
`cells` array of a real `HierarchicalHashGrid` and count the occupied ones (N unit boxes, uniform,
about 2 overlapping pairs per body, one grid). Strategies: **wrap** (parsim: split into
ix, iy, iz, add offset, mask, recombine), **thesis** (int32 offset-array id per cell, shared
27 x int32 array for inner cells, private one per outer cell), **hybrid** (shared linear offsets
for inner cells, wrap for border cells, nothing stored per cell), and two extra wrap variants
that store nothing either: **wrap-const** (the 13 offsets as compile-time constants instead of
parsim's runtime `half` array) and **wrap-rows** (y and z wrapped once per neighbour row of 3
cells). Times: `time.process_time`,
{args.rounds} interleaved rounds (the order rotates every round), each sample >= {args.min_sample} s;
"ns / occ. cell" is the median sample divided by the cells visited; "ratio" is the median over
rounds of the per-round ratio to wrap, [25th-75th percentile]. Extra memory: thesis by eq. 3.1.2
(`xyz * 4 + (1 + n(x, y, z)) * 108` bytes), hybrid one 108-byte array per grid, wrap nothing.

{md_table(rows)}

{notes}

**Conclusion.** {concl}
{info['vec_note']}

Machine: {info['cpu']}, {info['cores']} cores (shared, load average {info['load']} at the
start); Python {info['python']}, numpy {info['numpy']}, numba {info['numba']}; {info['date']}; whole run {info['total']:.0f} s.

Command (repository root):

```sh
{cmd}
```

![ns per occupied cell and extra memory](hhg_neighbours.png)
"""
    with open(path, "w") as f:
        f.write(text)


def plot(path, res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    x = np.arange(len(res))
    k = len(STRATEGIES)
    w = 0.8 / k
    labels = [f"N={_nlabel(r['n'])}" for r in res]
    for i, s in enumerate(STRATEGIES):
        dx = (i - (k - 1) / 2) * w
        a1.bar(x + dx, [r["ns_cell"][s] for r in res], w, label=s,
               hatch="//" if s.startswith("wrap-") else None)
        for xi, r in zip(x, res):
            if s != "wrap":
                a1.text(xi + dx, r["ns_cell"][s], f"{r['ratio'][s]:.2f}", ha="center",
                        va="bottom", fontsize=7)
    a1.set_xticks(x, labels)
    a1.set_ylabel("ns per occupied cell (13 lookups), median")
    a1.set_title("neighbour lookups (labels: time / wrap, median of rounds)")
    a1.legend(fontsize=8)
    for i, s in enumerate(("thesis", "hybrid")):
        a2.bar(x + (i - 0.5) * 0.4, [r["mem"][s] / r["n"] for r in res], 0.4, label=s,
               color=f"C{STRATEGIES.index(s)}")
    a2.set_xticks(x, labels)
    a2.set_ylabel("extra bytes per body")
    a2.set_title("memory added (thesis: eq. 3.1.2; wrap*: 0)")
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1e4,1e5,1e6", help="comma-separated body counts")
    ap.add_argument("--rounds", type=int, default=31, help="interleaved repetitions per size")
    ap.add_argument("--min-sample", type=float, default=0.03, help="seconds per timed sample")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks"),
                    help="directory for hhg_neighbours.md / .png ('' = none)")
    args = ap.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    info = machine()
    cache = os.environ.get("NUMBA_CACHE_DIR")
    cmd = (f"export NUMBA_CACHE_DIR={cache} && " if cache else "") + \
        "python " + " ".join(shlex.quote(a) for a in
                             [os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:])
    t_start = time.perf_counter()
    # compile (or load from the cache) on a small case first
    run_size(2000, argparse.Namespace(seed=1, rounds=1, min_sample=0.0))
    print(f"warm-up (compile / cache load): {time.perf_counter() - t_start:.1f} s", flush=True)
    res = []
    for n in sizes:
        t0 = time.perf_counter()
        res.append(run_size(n, args))
        r = res[-1]
        print(f"N={n:.0e}: {time.perf_counter() - t0:.1f} s (HHG build {r['t_build']:.1f} s), "
              f"pairs/body {r['pairs_per_body']:.2f}, ratios thesis {r['ratio']['thesis']:.3f} "
              f"hybrid {r['ratio']['hybrid']:.3f}", flush=True)
    rows = table_rows(res)
    print()
    print(text_table(rows))
    concl = conclusion(res)
    info["total"] = time.perf_counter() - t_start
    print()
    print(concl)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        write_md(os.path.join(args.out, "hhg_neighbours.md"), res, info, cmd, concl, rows, args)
        plot(os.path.join(args.out, "hhg_neighbours.png"), res)
        print(f"\nwrote {args.out}/hhg_neighbours.md and .png")
    print(f"total {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
