"""Placement benchmark: per-rank setup cost of the ``random`` generator, ``placement = "global"``
against ``placement = "local"``, under weak scaling.

Scene: equal spheres (radius 0.5) at packing fraction ``phi`` (default 0.2) filling a fully
periodic box, no walls, a fixed number of bodies per rank (default 20,000 and 125,000; 125,000
is the pe model's bodies per process): each rank's share is a cube of side
``s = (per_rank * 4/3 pi 0.5^3 / phi)^(1/3)`` and the box is ``P s x s x s`` on P ranks, cut
along x into P cubes by ``[domain] blocks = [P, 1, 1]`` (parsim's default blocks cut this box
2 x 2 x 1 on 4 ranks; ``--blocks default`` measures those instead). Material: density 1000,
restitution 0.5, collision time 1e-3, dt 1e-5, skin 0.1, seed 1.

The bodies are made by ``parsim.config.build(tomllib.loads(text))`` of a config with one
``random`` generator (``count = per_rank * P``), once per placement:

* ``global``: the serial random sequential addition (RSA) of all bodies, made whole on every
  rank (``parsim.config._rsa``), then a collective ``add_spheres`` of all of them, each rank
  keeping its block's bodies;
* ``local``: ``parsim/packing.py``: each rank computes only the generation cells within
  ``packing.HALO`` = 7 cells of its block (RSA colour by colour, ``packing.fill``) and adds the
  bodies whose centre it owns.

Each (placement, bodies per rank, phi, ranks) is its own ``mpiexec -n P python -m mpi4py
bench_placement.py --worker JSON`` launch (the peak memory of one case does not mix with
another's), launched ``--repeats`` times (default 3), the repeats interleaved over the cases and
the two placements of a (size, phi, ranks) taking turns at going first; the report gives
medians. In the worker: both placements are first built once on a small scene of the same kind
(2,000 bodies per rank: imports, numba cache loads, first calls out of the way), then
``gc.collect()``, the baseline ``ru_maxrss`` is read, then barrier / build / barrier:

* build time: wall time from the first barrier to the second (= the slowest rank);
* CPU time per rank: user + sys CPU time of the rank's process (getrusage, RUSAGE_SELF) from
  the first barrier to its entry into the second. On this 2-core machine 4 and 8 ranks are
  oversubscribed: wall time then counts the waits for a core, CPU time does not, so CPU time per
  rank is what shows how the work per rank scales. It does count MPICH's busy polling inside the
  build's collectives (a rank waiting for the others in an allreduce spins); hence also:
* kernel CPU time per rank: ``time.process_time`` summed over the compiled placement kernels
  (``parsim.config._rsa`` for global; ``parsim.packing.room`` and ``parsim.packing.fill`` for
  local), which contain no communication. The kernels are wrapped in the worker (module
  attributes replaced by timing wrappers; parsim's code is not changed);
* bodies computed per rank: the bodies the rank's kernel placed or tried to place
  (``radii.size`` of ``_rsa``; ``pos.shape[0]`` of ``fill``), against the bodies it owns
  (``sim.n_bodies``) afterwards: computed / owned is the redundancy (global: P, the whole run;
  local: the halo's);
* peak memory increase per rank: ``ru_maxrss`` after the build minus the baseline (KiB);
* the global count ``sim.count_bodies()``, asserted equal to ``per_rank * P`` for both
  placements;
* for the smallest size and ``local`` only: a fingerprint of every body (sha256 of the uids in
  uid order and of their positions' bytes, gathered with ``sim.state(gather=True)`` after the
  measurement). The driver also builds each P-rank box (P > 1) on 1 rank once (untimed check
  launches) and compares: "yes" = the same uids at the same positions, bit for bit, on 1 and
  on P ranks.

    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/bench_placement.py          # ~9 min here
    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/bench_placement.py --quick  # ~1 min

Writes docs/benchmarks/placement.md, placement.json, placement.png (``--out DIR``);
``--report-from placement.json`` rewrites the report from an earlier run without running anything.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from bench_common import machine_info, md_table, text_table  # noqa: E402
from bench_common import compile_first, run_command, use_repo  # noqa: E402

use_repo(REPO)  # measure this tree's parsim

RADIUS = 0.5
DT, SKIN, SEED = 1e-5, 0.1, 1
MATERIAL = dict(density=1000.0, restitution=0.5, collision_time=1e-3)
PLACEMENTS = ("global", "local")
WARMUP_PER_RANK = 2000
MiB = 1024.0                      # ru_maxrss is in KiB


# ==========================================================================================
# worker (inside mpiexec)
# ==========================================================================================
def side(per_rank: int, phi: float) -> float:
    """Side of the cube holding one rank's bodies at packing fraction phi."""
    return (per_rank * 4.0 / 3.0 * math.pi * RADIUS ** 3 / phi) ** (1.0 / 3.0)


def config_text(placement: str, per_rank: int, phi: float, box_ranks: int,
                blocks: list | None = None) -> str:
    s = side(per_rank, phi)
    blocks_line = f"blocks = {list(blocks)!r}" if blocks else ""
    return f"""
[simulation]
dt = {DT!r}
steps = 0
skin = {SKIN!r}
seed = {SEED}

[domain]
lo = [0.0, 0.0, 0.0]
hi = [{box_ranks * s!r}, {s!r}, {s!r}]
periodic = [true, true, true]
{blocks_line}

[[materials]]
name = "grain"
density = {MATERIAL['density']!r}
restitution = {MATERIAL['restitution']!r}
collision_time = {MATERIAL['collision_time']!r}

[[bodies]]
kind = "random"
placement = "{placement}"
shape = "sphere"
material = "grain"
radius = {RADIUS!r}
count = {per_rank * box_ranks}
"""


class Kernels:
    """Timing / counting wrappers around the compiled placement kernels (module attributes
    replaced; the callers look them up at call time)."""

    def __init__(self):
        import parsim.config as C
        import parsim.packing as K

        self.reset()
        self._wrap(C, "_rsa", lambda a: int(a[2].shape[0]))           # radii: all bodies
        self._wrap(K, "room", None)
        self._wrap(K, "fill", lambda a: int(a[16].shape[0]))          # pos: computed bodies

    def reset(self):
        self.cpu = {"_rsa": 0.0, "room": 0.0, "fill": 0.0}
        self.computed = 0
        self.calls = {"_rsa": 0, "room": 0, "fill": 0}

    def _wrap(self, mod, name, count):
        fn = getattr(mod, name)

        def wrapped(*a):
            c0 = time.process_time()
            out = fn(*a)
            self.cpu[name] += time.process_time() - c0
            self.calls[name] += 1
            if count is not None:
                self.computed += count(a)
            return out

        setattr(mod, name, wrapped)


def build(placement, per_rank, phi, box_ranks, blocks=None):
    import tomllib

    import parsim.config

    return parsim.config.build(tomllib.loads(config_text(placement, per_rank, phi, box_ranks,
                                                         blocks))).sim


def maxrss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def fingerprint_all(sim):
    """sha256 of all bodies' uids (sorted) and positions, on rank 0 (None elsewhere)."""
    s = sim.state(gather=True)
    if s is None:
        return None
    uid = np.ascontiguousarray(s["uid"].astype(np.int64))
    pos = np.ascontiguousarray(s["position"].astype(np.float64))
    assert np.all(np.diff(uid) > 0)
    h = hashlib.sha256(uid.tobytes())
    h.update(pos.tobytes())
    return {"n": int(uid.size), "sha256": h.hexdigest()[:24], "uid_max": int(uid.max())}


def worker(case: dict) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    placement, per_rank, phi = case["placement"], case["per_rank"], case["phi"]
    box_ranks = case.get("box_ranks", size)
    n_expected = per_rank * box_ranks
    blocks = [size, 1, 1] if case.get("blocks", "x") == "x" else None
    kern = Kernels()
    # warm-up: both placements once on a small scene (imports, numba cache loads, first calls)
    for pl in PLACEMENTS:
        s = build(pl, WARMUP_PER_RANK, phi, size, blocks)
        assert s.count_bodies() == WARMUP_PER_RANK * size
        del s
    gc.collect()
    kern.reset()
    comm.Barrier()
    max0 = maxrss_kib()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    comm.Barrier()
    t0 = time.perf_counter()
    sim = build(placement, per_rank, phi, box_ranks, blocks)
    t_own = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    comm.Barrier()
    t_build = time.perf_counter() - t0
    max1 = maxrss_kib()
    n = sim.count_bodies()
    assert n == n_expected, (n, n_expected)
    mine = {"rank": rank, "own_s": t_own, "peak_kib": max1 - max0, "maxrss0_kib": max0,
            "user_s": ru1.ru_utime - ru0.ru_utime, "sys_s": ru1.ru_stime - ru0.ru_stime,
            "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
            "kernel_s": sum(kern.cpu.values()), "kernel_parts": dict(kern.cpu),
            "calls": dict(kern.calls), "computed": kern.computed, "owned": sim.n_bodies}
    per_rank_out = comm.gather(mine, root=0)
    t_max = comm.allreduce(t_build, op=MPI.MAX)
    fp = fingerprint_all(sim) if case.get("fingerprint") else None
    if rank == 0:
        print("RESULT " + json.dumps({
            "placement": placement, "per_rank_bodies": per_rank, "phi": phi, "ranks": size,
            "box_ranks": box_ranks, "box": [box_ranks * side(per_rank, phi),
                                            side(per_rank, phi), side(per_rank, phi)],
            "blocks": list(sim.dec.dims), "bodies": n, "build_s": t_max,
            "fingerprint": fp, "per_rank": per_rank_out}), flush=True)


# ==========================================================================================
# driver
# ==========================================================================================
def launch(case: dict, ranks: int, timeout: float = 1200) -> dict:
    py = REPO / ".venv" / "bin" / "python"
    py = py if py.exists() else Path(sys.executable)
    mpiexec = py.parent / "mpiexec"
    cmd = [str(mpiexec), "-n", str(ranks), str(py), "-m", "mpi4py", str(Path(__file__).resolve()),
           "--worker", json.dumps(case)]
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".numba_cache"))
    env.setdefault("NUMBA_NUM_THREADS", "1")
    compile_first(py, env, ranks)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[7:])
            out["job_s"] = time.perf_counter() - t0
            return out
    raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n"
                       f"{r.stderr[-3000:]}")


PER_RANK_KEYS = ("own_s", "user_s", "sys_s", "cpu_s", "kernel_s", "peak_kib", "maxrss0_kib")


def aggregate(runs: list[dict]) -> dict:
    """One case over its launches: medians, min/max, every value."""
    r0 = runs[0]
    out = {k: r0[k] for k in ("placement", "per_rank_bodies", "phi", "ranks", "box_ranks", "box",
                              "blocks", "bodies")}
    b = [r["build_s"] for r in runs]
    out.update(build_s=statistics.median(b), build_min=min(b), build_max=max(b), build_all=b)
    fps = [r["fingerprint"] for r in runs if r["fingerprint"] is not None]
    out["fingerprint"] = fps[0] if fps else None
    out["fp_stable"] = all(f == fps[0] for f in fps) if fps else None
    per_rank = []
    for i in range(r0["ranks"]):
        rr = [r["per_rank"][i] for r in runs]
        d = {"rank": i, "owned": rr[0]["owned"], "computed": rr[0]["computed"],
             "counts_stable": all(p["owned"] == rr[0]["owned"]
                                  and p["computed"] == rr[0]["computed"] for p in rr)}
        for k in PER_RANK_KEYS:
            vals = [p[k] for p in rr]
            d[k] = statistics.median(vals)
            d[k + "_all"] = vals
        for part in rr[0]["kernel_parts"]:
            d["kernel_" + part] = statistics.median(p["kernel_parts"][part] for p in rr)
        per_rank.append(d)
    out["per_rank"] = per_rank
    out["launches"] = len(runs)
    out["runs"] = runs
    return out


def stat(r, key, how):
    vals = [p[key] for p in r["per_rank"]]
    return max(vals) if how == "max" else sum(vals) / len(vals)


def redundancy(r):
    """Bodies computed / bodies owned: max over ranks, and the total over the ranks."""
    pr = r["per_rank"]
    return (max(p["computed"] / max(p["owned"], 1) for p in pr),
            sum(p["computed"] for p in pr) / max(sum(p["owned"] for p in pr), 1))


def _k(n):
    return f"{n / 1000:.0f}k" if n >= 1000 else str(n)


def rows_of(results):
    rows = []
    for r in results:
        owned = [p["owned"] for p in r["per_rank"]]
        comp = [p["computed"] for p in r["per_rank"]]
        red_max, red_tot = redundancy(r)
        rows.append([
            r["placement"], _k(r["per_rank_bodies"]), f"{r['phi']:g}", str(r["ranks"]),
            f"{r['bodies']:,}",
            f"{r['build_s']:.2f} ({r['build_min']:.2f}-{r['build_max']:.2f})",
            f"{stat(r, 'cpu_s', 'max'):.2f} / {stat(r, 'cpu_s', 'mean'):.2f}",
            f"{stat(r, 'kernel_s', 'max'):.2f} / {stat(r, 'kernel_s', 'mean'):.2f}",
            f"{stat(r, 'peak_kib', 'max') / MiB:.0f} / {stat(r, 'peak_kib', 'mean') / MiB:.0f}",
            f"{min(owned):,}-{max(owned):,}" if r["ranks"] > 1 else f"{owned[0]:,}",
            f"{min(comp):,}-{max(comp):,}" if r["ranks"] > 1 else f"{comp[0]:,}",
            f"{red_max:.2f} / {red_tot:.2f}",
            r.get("same_as_1_rank", "-")])
    return rows


HEAD = ["placement", "bodies/rank", "phi", "ranks", "bodies",
        "build wall [s]: median (min-max)", "CPU per rank [s]: max / mean",
        "kernel CPU per rank [s]: max / mean", "peak RSS increase per rank [MiB]: max / mean",
        "owned per rank", "computed per rank", "computed/owned: max rank / all ranks",
        "same bodies as on 1 rank"]


def compare(results, checks) -> None:
    """Mark each result (smallest size) with whether its gathered bodies equal the 1-rank
    build of the same box (``checks``: 1-rank launches keyed by (placement, per_rank, phi,
    box_ranks)); and check that the two placements agree on the count."""
    for r in results:
        fp = r.get("fingerprint")
        if fp is None:
            continue
        if r["ranks"] == 1:
            r["same_as_1_rank"] = "(reference)"
            continue
        ref = checks.get((r["placement"], r["per_rank_bodies"], r["phi"], r["box_ranks"]))
        if ref is None:
            continue
        same = fp == ref["fingerprint"] and r["fp_stable"]
        r["same_as_1_rank"] = "yes" if same else "NO"
    by = {(r["placement"], r["per_rank_bodies"], r["phi"], r["ranks"]): r for r in results}
    for (pl, n, phi, ranks), r in by.items():
        o = by.get(("local" if pl == "global" else "global", n, phi, ranks))
        if o is not None:
            r["count_equal"] = r["bodies"] == o["bodies"]


def plot(results, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phis = sorted({r["phi"] for r in results}, reverse=True)
    sizes = sorted({r["per_rank_bodies"] for r in results})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    colours = {"global": "C3", "local": "C0"}
    marks = {s: m for s, m in zip(sizes, "os^D")}
    styles = {p: ls for p, ls in zip(phis, ("-", ":", "-."))}
    for pl in PLACEMENTS:
        for n in sizes:
            for phi in phis:
                rs = sorted((r for r in results if r["placement"] == pl
                             and r["per_rank_bodies"] == n and r["phi"] == phi),
                            key=lambda r: r["ranks"])
                if not rs:
                    continue
                lab = f"{pl}, {_k(n)}/rank" + (f", phi {phi:g}" if len(phis) > 1 else "")
                x = [r["ranks"] for r in rs]
                kw = dict(color=colours[pl], ls=styles[phi], marker=marks[n], label=lab)
                axes[0].plot(x, [stat(r, "cpu_s", "max") for r in rs], **kw)
                axes[1].plot(x, [stat(r, "kernel_s", "max") for r in rs], **kw)
                axes[2].plot(x, [stat(r, "peak_kib", "max") / MiB for r in rs], **kw)
    titles = ["build CPU time per rank (max over ranks)",
              "placement kernel CPU time per rank (max)",
              "peak RSS increase per rank (max)"]
    ylabels = ["CPU time (user+sys) [s]", "kernel CPU time [s]", "MiB"]
    for ax, t, yl in zip(axes, titles, ylabels):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sorted({r["ranks"] for r in results}))
        ax.set_xticklabels([str(x) for x in sorted({r["ranks"] for r in results})])
        ax.set_xlabel("ranks (weak scaling: fixed bodies per rank)")
        ax.set_ylabel(yl)
        ax.set_title(t, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def reading_of(results) -> str:
    """Plain statements computed from the numbers."""
    lines = []
    by = {(r["placement"], r["per_rank_bodies"], r["phi"], r["ranks"]): r for r in results}

    def seq(rs, f, fmt):
        return ", ".join(fmt.format(f(r)) for r in rs)

    for n in sorted({r["per_rank_bodies"] for r in results}):
        for phi in sorted({r["phi"] for r in results}, reverse=True):
            for pl in PLACEMENTS:
                rs = sorted((r for (p, nn, ph, _), r in by.items()
                             if p == pl and nn == n and ph == phi), key=lambda r: r["ranks"])
                if len(rs) < 2:
                    continue
                a, b = rs[0], rs[-1]
                ca, cb = stat(a, "cpu_s", "max"), stat(b, "cpu_s", "max")
                ka, kb = stat(a, "kernel_s", "max"), stat(b, "kernel_s", "max")
                ma, mb = stat(a, "peak_kib", "max"), stat(b, "peak_kib", "max")
                # kernel CPU per body the rank computed (max over ranks of kernel / computed)
                per_body = seq(rs, lambda r: max(p["kernel_s"] / max(p["computed"], 1)
                                                 for p in r["per_rank"]) * 1e6, "{:.1f}")
                lines.append(
                    f"- **{pl}, {_k(n)} bodies per rank, phi {phi:g}**, on "
                    f"{', '.join(str(r['ranks']) for r in rs)} ranks: CPU per rank (max) "
                    f"{seq(rs, lambda r: stat(r, 'cpu_s', 'max'), '{:.2f}')} s "
                    f"({cb / ca:.2f}x from {a['ranks']} to {b['ranks']}); kernel CPU "
                    f"{seq(rs, lambda r: stat(r, 'kernel_s', 'max'), '{:.2f}')} s "
                    f"({kb / ka:.2f}x); peak RSS increase per rank "
                    f"{seq(rs, lambda r: stat(r, 'peak_kib', 'max') / MiB, '{:.0f}')} MiB "
                    f"({mb / ma:.2f}x); computed / owned (max rank) "
                    f"{seq(rs, lambda r: redundancy(r)[0], '{:.2f}')}; kernel CPU per "
                    f"computed body {per_body} us.")
    lines.append(
        "- Wall times on this shared machine were several times the CPU times even on 1 rank "
        "(the load average is in the header), and 4 and 8 ranks share 2 cores: read the CPU "
        "columns for the scaling, the wall column only as what a user waited here.")
    return "\n".join(lines)


def report(results, info, cmd, out: Path):
    bmode = info.get("blocks_mode", "x")
    table = md_table(HEAD, rows_of(results))
    v = info["versions"]
    launches = sorted({r["launches"] for r in results})
    counts_ok = all(r.get("count_equal", True) for r in results)
    same = [r for r in results if r.get("same_as_1_rank") in ("yes", "NO")]
    same_txt = (", ".join(f"{_k(r['per_rank_bodies'])}/rank phi {r['phi']:g} on "
                          f"{r['ranks']} ranks: {r['same_as_1_rank']}" for r in same)
                or "not checked")
    boxes = []
    for r in results:
        if r["ranks"] == 1:
            boxes.append(f"{_k(r['per_rank_bodies'])} per rank at phi {r['phi']:g}: side "
                         f"{r['box'][1]:.2f}")
    boxes = "; ".join(dict.fromkeys(boxes))
    blocks = "; ".join(dict.fromkeys(f"{r['ranks']} ranks: {r['blocks']}" for r in results))
    md = f"""# Placement benchmark: setup cost of `placement = "global"` vs `"local"`

Produced by `{cmd}` ({info['date_utc']}, git {info.get('git_head', '?')}).
Machine: {info['cpu_model']}, {info['cpus']} CPUs, {info['mem_gib']} GiB, {info['os']}
(shared with other jobs; load average at the start {', '.join(f'{x:.2f}' for x in
info['loadavg_start'])}). Python {v['python']}, numpy {v['numpy']}, numba {v['numba']},
mpi4py {info.get('mpi4py')}, MPI: {info.get('mpi')}. NUMBA_NUM_THREADS=1.

## What is measured

Weak scaling: equal spheres (radius {RADIUS}) at packing fraction phi filling a fully periodic
box of P cubes (one per rank) along x, a fixed number of bodies per rank ({boxes}); built with
`parsim.config.build(tomllib.loads(text))` of a config with one `random` generator
(`count = bodies per rank * P`, seed {SEED}), once with `placement = "global"` (the serial RSA
of all bodies on every rank, then a collective `add_spheres`) and once with `"local"`
(`parsim/packing.py`: each rank computes the generation cells within 7 cells of its block).
Blocks: {blocks}{' (`[domain] blocks = [P, 1, 1]`: one cube per rank)' if bmode == 'x' else " (parsim's default)"}. **4 and 8 ranks are oversubscribed on this 2-core machine**:
their wall times include waiting for a core; per-rank CPU time is what shows the scaling.

Each case is its own `mpiexec` launch, repeated {'/'.join(map(str, launches))} time(s), the
repeats interleaved over the cases and the two placements taking turns at going first; numbers
are medians over the launches. In a launch both placements are first built on a scene of
{WARMUP_PER_RANK:,} bodies per rank (imports, numba cache loads), then `gc.collect()`, the
baseline `ru_maxrss`, barrier / build / barrier.

- **build wall**: between the barriers (the slowest rank), median (min-max) over launches.
- **CPU per rank**: user + sys CPU time (getrusage) of each rank from the first barrier to its
  entry into the second; max and mean over the ranks. It includes MPICH's busy polling in the
  collectives inside the build (a rank that waits for the others spins).
- **kernel CPU per rank**: `time.process_time` summed over the compiled placement kernels, no
  communication inside: `parsim.config._rsa` (global), `parsim.packing.room` +
  `parsim.packing.fill` (local). Wrapped in the worker; parsim's code is not changed.
- **peak RSS increase**: `ru_maxrss` after the build minus the baseline, per rank process.
- **owned / computed per rank**: bodies the rank owns after the build (`sim.n_bodies`), and
  bodies its kernel placed (global: all of them, `_rsa`'s radii; local: `fill`'s bodies of the
  rank's cells with their halo). computed / owned is the redundancy: the max over the ranks,
  and the sum computed over the sum owned.
- Every launch asserts `sim.count_bodies()` = bodies per rank * P (both placements: the same
  global count{'' if counts_ok else ' -- NOT everywhere, see the JSON'}).
- **same bodies as on 1 rank** (local, smallest size only): the P-rank box is also built once
  on 1 rank (untimed); every body is gathered with `sim.state(gather=True)` after the
  measurement and hashed (sha256 of the sorted uids and their positions' bytes); "yes" = the
  P-rank run (every launch) and the 1-rank build are bit-identical. Result: {same_txt}.

## Results

{table}

## Reading

{reading_of(results)}

## Raw numbers

`placement.json` (every launch, every rank: own wall time, user/sys CPU, kernel CPU per kernel,
baseline and peak ru_maxrss, owned and computed bodies; the fingerprints). Plot:
`placement.png` (per-rank CPU time, kernel CPU time and peak memory vs ranks).

![placement](placement.png)
"""
    (out / "placement.md").write_text(md)
    plot(results, out / "placement.png")
    return md


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true",
                   help="20k bodies per rank only, 1 and 2 ranks, 1 repeat")
    p.add_argument("--sizes", type=int, nargs="+", default=[20000, 125000],
                   help="bodies per rank (default 20000 125000)")
    p.add_argument("--phis", type=float, nargs="+", default=[0.2], help="packing fractions")
    p.add_argument("--phis-small", type=float, nargs="*", default=[0.1],
                   help="extra packing fractions for the smallest size only (default 0.1)")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--ranks-small", type=int, nargs="*", default=[8],
                   help="extra rank counts for the smallest size only (default 8)")
    p.add_argument("--blocks", choices=("x", "default"), default="x",
                   help="x: [domain] blocks = [P, 1, 1] (default); default: parsim's choice")
    p.add_argument("--repeats", type=int, default=3, help="launches per case (default 3)")
    p.add_argument("--out", help="report directory (default docs/benchmarks)")
    p.add_argument("--report-from", metavar="JSON",
                   help="only rewrite the report from an earlier run's placement.json")
    a = p.parse_args()
    if a.worker:
        worker(json.loads(a.worker))
        return
    out = Path(a.out) if a.out else REPO / "docs" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    if a.report_from:
        old = json.loads(Path(a.report_from).read_text())
        results, info, cmd = old["results"], old["machine"], old["command"].strip()
    else:
        if a.quick:
            a.sizes, a.ranks, a.ranks_small, a.phis_small, a.repeats = [20000], [1, 2], [], [], 1
        info = machine_info(str(REPO))
        info["blocks_mode"] = a.blocks
        try:
            import mpi4py
            from mpi4py import MPI
            info["mpi4py"] = mpi4py.__version__
            info["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
        except Exception:  # noqa: BLE001
            info["mpi4py"] = info["mpi"] = "?"
        cmd = run_command()
        small = min(a.sizes)
        phis = a.phis + [x for x in a.phis_small if x not in a.phis]
        cases = []
        for n in a.sizes:
            for phi in (phis if n == small else a.phis):
                for ranks in a.ranks + (a.ranks_small if n == small else []):
                    for pl in PLACEMENTS:
                        cases.append((pl, n, phi, ranks))
        runs = {c: [] for c in cases}
        t0 = time.perf_counter()
        for rep in range(a.repeats):
            order = list(PLACEMENTS) if rep % 2 == 0 else list(PLACEMENTS)[::-1]
            for pl, n, phi, ranks in sorted(cases, key=lambda c: (
                    a.sizes.index(c[1]), phis.index(c[2]), c[3], order.index(c[0]))):
                print(f"[{time.perf_counter() - t0:6.1f} s] launch {rep + 1}/{a.repeats}: "
                      f"{pl}, {n} per rank, phi {phi:g}, {ranks} rank(s)", flush=True)
                r = launch({"placement": pl, "per_rank": n, "phi": phi, "blocks": a.blocks,
                            "fingerprint": n == small and pl == "local"}, ranks)
                r["first_of_pair"] = order.index(pl) == 0
                runs[(pl, n, phi, ranks)].append(r)
                pr = r["per_rank"]
                print("    build %.2f s, CPU/rank max %.2f s, kernel max %.2f s, peak/rank max "
                      "%.0f MiB, computed/owned max %.2f" % (
                          r["build_s"], max(q["cpu_s"] for q in pr),
                          max(q["kernel_s"] for q in pr), max(q["peak_kib"] for q in pr) / MiB,
                          max(q["computed"] / max(q["owned"], 1) for q in pr)), flush=True)
        checks = {}
        for pl, n, phi, ranks in cases:
            if pl == "local" and n == small and ranks > 1 and (pl, n, phi, ranks) not in checks:
                print(f"[{time.perf_counter() - t0:6.1f} s] check: {pl}, the {ranks}-rank box "
                      f"of {n} per rank, phi {phi:g}, on 1 rank", flush=True)
                r = launch({"placement": pl, "per_rank": n, "phi": phi, "box_ranks": ranks,
                            "fingerprint": True}, 1)
                checks[(pl, n, phi, ranks)] = r
        print(f"[{time.perf_counter() - t0:6.1f} s] done", flush=True)
        results = [aggregate(runs[c]) for c in cases]
        compare(results, checks)
        info["checks"] = [{k: v for k, v in r.items() if k != "per_rank"}
                          | {"per_rank": r["per_rank"]} for r in checks.values()]
        info["driver_wall_s"] = time.perf_counter() - t0
    print()
    print(text_table(HEAD, rows_of(results), "setup cost of the random generator's placement"))
    print()
    print(reading_of(results))
    report(results, info, cmd, out)
    (out / "placement.json").write_text(json.dumps({"machine": info, "command": cmd,
                                                    "results": results}, indent=1))
    print(f"\nwrote {out / 'placement.md'}, placement.json, placement.png")


if __name__ == "__main__":
    main()
