"""What a fresh hash grid's add + remove costs on this machine, against how long ago the memory
it gets was last used: the host's first-touch cost, beside parsim's own.

``bench_broadphase.py``'s setup study times fresh structures: every array of a new
``HierarchicalHashGrid`` is new memory, which the kernel maps on first touch. On a virtual
machine whose balloon driver hands memory freed for a while back to the host (this machine:
``virtio_balloon``), first touching it again costs the host's work too, and that cost depends on
how long the memory lay free, not on parsim. This script measures both, in one process:

1. ``touch``: map 256 MiB (``np.empty``; ``--touch-mib``) and write one byte per 4 KiB page,
   after the memory of the previous round lay free for ``idle`` seconds (the process slept):
   ns per 4 KiB page.
2. ``fresh add+remove``: the same idle, then a fresh ``HierarchicalHashGrid`` given N bodies in
   one ``add`` and emptied by one ``remove`` (the thesis' cuboids, as the setup study): ns per
   body, and minor page faults per 1,000 bodies (``getrusage``).
3. ``reused``: the same structure filled and emptied again at once (its memory touched):
   parsim's own cost.

Idle times alternate round by round (``--repeats`` rounds each), medians reported.

    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/bench_first_touch.py

Writes ``first_touch.md``, ``first_touch.json`` and ``first_touch.png`` to ``--out``
(default docs/benchmarks).
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from bench_common import machine_info, pyplot, run_command, text_table, write_report  # noqa: E402
from bench_broadphase import make_bodies  # noqa: E402

TOUCH_BYTES = 256 << 20
PAGE = 4096


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def touch_ns_per_page(idle: float, nbytes: int = TOUCH_BYTES) -> float:
    """Sleep ``idle`` s, then map ``nbytes`` and write one byte per 4 KiB page."""
    time.sleep(idle)
    t0 = time.perf_counter()
    a = np.empty(nbytes, np.uint8)
    a[::PAGE] = 1
    t = time.perf_counter() - t0
    del a
    return 1e9 * t / (nbytes // PAGE)


def add_remove(n: int, idle: float, lo, hi, ids, rm) -> tuple[float, float, float]:
    """Sleep ``idle`` s, then a fresh structure's add + remove (ns/body, faults per 1,000
    bodies) and the same structure's again (ns/body)."""
    from parsim.broadphase import HierarchicalHashGrid

    time.sleep(idle)
    gc.disable()
    try:
        bp = HierarchicalHashGrid()
        f0 = _faults()
        t0 = time.perf_counter()
        bp.add(ids, lo, hi)
        bp.remove(rm)
        t1 = time.perf_counter()
        f1 = _faults()
        bp.add(ids, lo, hi)
        bp.remove(rm)
        t2 = time.perf_counter()
        assert len(bp) == 0
        del bp
    finally:
        gc.enable()
    return 1e9 * (t1 - t0) / n, 1e3 * (f1 - f0) / n, 1e9 * (t2 - t1) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[30_000, 1_000_000])
    ap.add_argument("--idle", type=float, nargs="+", default=[0.0, 0.5, 2.0, 5.0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--touch-mib", type=int, default=TOUCH_BYTES >> 20)
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    a = ap.parse_args()
    data = {}
    for n in a.sizes:
        b = make_bodies(dict(gen="thesis", n=n, size_ratio=1.0, seed=5))
        lo, hi = b.aabbs(0)
        rm = b.ids[np.random.default_rng(6).permutation(n)]
        add_remove(n, 0.0, lo, hi, b.ids, rm)   # loads the kernels (untimed)
        data[n] = {"lo": lo, "hi": hi, "ids": b.ids, "rm": rm}
    res = {(n, s): {"touch": [], "fresh": [], "faults": [], "reused": []}
           for n in a.sizes for s in a.idle}
    for k in range(a.repeats):
        for s in (a.idle if k % 2 == 0 else a.idle[::-1]):
            for n in a.sizes:
                r = res[(n, s)]
                r["touch"].append(touch_ns_per_page(s, a.touch_mib << 20))
                d = data[n]
                fresh, faults, reused = add_remove(n, s, d["lo"], d["hi"], d["ids"], d["rm"])
                r["fresh"].append(fresh)
                r["faults"].append(faults)
                r["reused"].append(reused)
                print(f"round {k + 1}/{a.repeats} idle {s:g} s N {n:,}: touch "
                      f"{r['touch'][-1]:.0f} ns/page, fresh {fresh:.0f} ns/body "
                      f"({faults:.1f} faults/1k), reused {reused:.0f} ns/body", flush=True)
    med = {key: {f: float(np.median(v)) for f, v in r.items()} for key, r in res.items()}
    heads = ["N", "idle before (s)", f"touch {a.touch_mib} MiB: ns per 4 KiB page",
             "fresh add+remove ns/body", "page faults / 1k bodies", "reused add+remove ns/body",
             "fresh / reused"]
    rows = [[f"{n:,}", f"{s:g}", f"{m['touch']:.0f}", f"{m['fresh']:.0f}", f"{m['faults']:.1f}",
             f"{m['reused']:.0f}", f"{m['fresh'] / m['reused']:.2f}"]
            for (n, s), m in med.items()]
    print(text_table(heads, rows, "first touch of memory vs a fresh hash grid's add + remove"))
    info = machine_info(str(REPO))
    command = run_command()
    out = Path(a.out)
    write_report(out, "first_touch",
                 "First touch of memory: the host's cost in a fresh hash grid's add + remove",
                 "Generated by `scripts/bench_first_touch.py` (method in its docstring). "
                 f"Medians of {a.repeats} rounds, idle times alternated. 'idle before' = how "
                 "long the process slept (its freed memory lay unused) before the measurement.",
                 command, info, heads, rows,
                 {"results": [{"n": n, "idle": s, **res[(n, s)]} for (n, s) in res]})
    plt = pyplot()
    if plt is not None:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for n in a.sizes:
            axes[1].plot(a.idle, [med[(n, s)]["fresh"] for s in a.idle], "o-",
                         label=f"fresh, N = {n:,}")
            axes[1].plot(a.idle, [med[(n, s)]["reused"] for s in a.idle], "s--",
                         label=f"reused, N = {n:,}")
        n0 = a.sizes[0]
        axes[0].plot(a.idle, [med[(n0, s)]["touch"] for s in a.idle], "o-")
        axes[0].set_xlabel("idle before (s)")
        axes[0].set_ylabel("ns per 4 KiB page")
        axes[0].set_title(f"touch {a.touch_mib} MiB of new memory")
        axes[1].set_xlabel("idle before (s)")
        axes[1].set_ylabel("ns per body")
        axes[1].set_title("HHG add N + remove all")
        axes[1].legend(fontsize=8)
        for ax in axes:
            ax.set_ylim(bottom=0)
        fig.tight_layout()
        fig.savefig(out / "first_touch.png", dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
