"""Rain benchmark: the cost of pouring a ``rain`` generator's batches into a region that the
earlier batches have crowded, ``placement = "global"`` against ``placement = "local"``, on one
rank.

Scene (embedded below as ``SCENE``, ``placement`` switched): lognormal steel spheres (radius
5 mm, sigma 0.25) raining in batches of ``count = 6000`` every 400 steps (``total = 40000``)
into the region [0.01, 0.49]^2 x [0.45, 0.59] (the top 14 cm) of a walled 0.5 x 0.5 x 0.6 m box,
falling at 0.5 m/s (+-0.1 random), dt 5e-5, seed 7. The bodies leave the region slowly (about
1-2 cm per 400 steps), so each batch finds it fuller than the last and places fewer bodies.

It is driven through the public machinery, ``parsim.runner.run_config(config_path, out_dir,
steps=N, overwrite=True, stream=...)``, on one rank (no mpiexec). The batch at step 0 is poured
by ``parsim.config.build``, the later ones (steps 400, 800, ...) by the runner's loop; both call
``parsim.config.pour``. The worker replaces module attributes by timing wrappers (parsim's code
is not changed; the callers look the names up at call time):

* ``parsim.config.pour`` and ``parsim.runner.pour`` (the runner imports the name): wall time
  (``perf_counter``) and CPU time (``process_time``) of the whole pour call, its return value
  (bodies placed), the bodies requested, and, before the call (untimed), the sim's finite body
  count and the bodies whose centre lies in the rain's region;
* the compiled placement kernels, wall and CPU time summed per pour: ``parsim.config._rsa``
  (global: serial random sequential addition of the whole batch, ``max_attempts`` default 200),
  ``parsim.packing.room`` + ``parsim.packing.fill`` (local: RSA in cells, ``max_attempts``
  default 1000 draws per body, scaled by up to 64x in crowded cells). Also recorded: the bodies
  and obstacles each kernel was given, and for ``fill`` the bodies that found no place and the
  draws they used up (their cell's ``attempts``, all spent).

Each (placement, repeat) is its own worker process (``--worker JSON``), launched ``--repeats``
times (default 3), interleaved global / local with the placement that goes first alternating
between repeats, so that the two runs of a pair are measured side by side on this shared,
noisy machine. In a worker: imports, then a warm-up ``run_config`` of a tiny version of the
scene for each placement (300 bodies per batch, 2 batches, 41 steps: numba cache loads and
first calls of the placement and step kernels), ``gc.collect()``, then the measured run. The
report gives, per batch, medians (min-max) over the repeats, and the ratio local / global as
the median (min-max) of the per-pair ratios (repeat i of local over repeat i of global).

    PYTHONPATH=. NUMBA_CACHE_DIR=.numba_cache NUMBA_NUM_THREADS=1 \\
        .venv/bin/python scripts/bench_rain.py          # ~10 min here (2 cores, loaded)
    ... scripts/bench_rain.py --quick      # --steps 1201 (batches 0-3), 1 repeat, ~2 min

Options: ``--steps N`` (default 2801: the pours at steps 0, 400, ..., 2400; the 40,000 of
``total`` are used up by the seventh batch, so there is no pour at 2800), ``--repeats R``,
``--out DIR`` (default docs/benchmarks), ``--report-from rain.json`` (rewrite the report from
an earlier run). Writes docs/benchmarks/rain.md, rain.json, rain.png.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from bench_common import machine_info, md_table, text_table  # noqa: E402
from bench_common import use_repo  # noqa: E402

use_repo(REPO)  # measure this tree's parsim

PLACEMENTS = ("global", "local")
REGION = ((0.01, 0.01, 0.45), (0.49, 0.49, 0.59))

SCENE = """
[simulation]
dt = 5e-5
steps = 6000
gravity = [0.0, 0.0, -9.81]
seed = 7
skin = 0.004

[domain]
lo = [0.0, 0.0, 0.0]
hi = [0.5, 0.5, 0.6]
walls = true

[output]
every = 400
progress_every = 2000

[[materials]]
name = "steel"
density = 7800.0
restitution = 0.6
collision_time = 5e-4
friction = 0.4

[[bodies]]
kind = "rain"
shape = "sphere"
material = "steel"
radius = 0.005
scale = { distribution = "lognormal", median = 1.0, sigma = 0.25 }
region = [[0.01, 0.01, 0.45], [0.49, 0.49, 0.59]]
count = 6000
every = 400
total = 40000
velocity = [0.0, 0.0, -0.5]
random_velocity = 0.1
placement = "local"
"""


def scene(placement: str, count: int = 6000, total: int = 40000, every: int = 400) -> str:
    """The scene with ``placement`` switched (and, for the warm-up, a smaller rain)."""
    text = SCENE.replace('placement = "local"', f'placement = "{placement}"')
    if (count, total, every) != (6000, 40000, 400):
        text = (text.replace("count = 6000", f"count = {count}")
                .replace("total = 40000", f"total = {total}")
                .replace("\nevery = 400\ntotal", f"\nevery = {every}\ntotal")
                .replace("[output]\nevery = 400", f"[output]\nevery = {every}"))
    assert f'placement = "{placement}"' in text
    return text


# ==========================================================================================
# worker
# ==========================================================================================
class Probe:
    """Timing wrappers around ``pour`` and the placement kernels (module attributes replaced).
    Records one entry per pour while ``active``."""

    KERNELS = ("_rsa", "room", "fill")

    def __init__(self):
        import parsim.config as C
        import parsim.packing as K
        import parsim.runner as R

        self.active = False
        self.batches: list[dict] = []
        self._cur: dict | None = None
        pour = C.pour

        def timed_pour(sim, rain, t=None):
            if not self.active:
                return pour(sim, rain, t)
            before, in_region = self._census(sim)
            cur = {"batch": len(self.batches), "step": int(sim.step_count),
                   "requested": int(min(rain.count, rain.remaining)),
                   "bodies_before": before, "in_region_before": in_region,
                   "kernel_wall": {k: 0.0 for k in self.KERNELS},
                   "kernel_cpu": {k: 0.0 for k in self.KERNELS},
                   "kernel_calls": {k: 0 for k in self.KERNELS},
                   "kernel_bodies": 0, "kernel_obstacles": 0, "missed": 0,
                   "missed_draws": 0, "max_tries": 0}
            self._cur = cur
            c0, w0 = time.process_time(), time.perf_counter()
            placed = pour(sim, rain, t)
            cur["pour_wall"] = time.perf_counter() - w0
            cur["pour_cpu"] = time.process_time() - c0
            self._cur = None
            cur["placed"] = int(placed)
            cur["kernel_wall_s"] = sum(cur["kernel_wall"].values())
            cur["kernel_cpu_s"] = sum(cur["kernel_cpu"].values())
            self.batches.append(cur)
            return placed

        C.pour = timed_pour
        R.pour = timed_pour
        self._wrap(C, "_rsa", self._after_rsa)
        self._wrap(K, "room", None)
        self._wrap(K, "fill", self._after_fill)

    @staticmethod
    def _census(sim):
        from parsim.shapes import PLANE

        s = sim.state()
        finite = s["shape"] != PLANE
        p = s["position"][finite]
        lo, hi = np.asarray(REGION[0]), np.asarray(REGION[1])
        inside = ((p >= lo) & (p <= hi)).all(axis=1)
        return int(finite.sum()), int(inside.sum())

    def _after_rsa(self, a, out):
        # _rsa(lo, hi, radii, obs_pos, obs_r, seed, attempts, out) -> placed
        cur = self._cur
        cur["kernel_bodies"] += int(a[2].shape[0])
        cur["kernel_obstacles"] += int(a[4].shape[0])
        cur["missed"] += int(a[2].shape[0]) - int(out)
        cur["missed_draws"] += (int(a[2].shape[0]) - int(out)) * int(a[6])
        cur["max_tries"] = max(cur["max_tries"], int(a[6]))

    def _after_fill(self, a, out):
        # fill(c0, dims, ex, ey, ez, rlo, rhi, start, size, ordinal, radius, obs_pos, obs_r,
        #      rb_max, key, attempts, pos, placed): attempts per generation cell
        cur = self._cur
        size, attempts, placed = a[8], a[15], a[17]
        tries = np.repeat(attempts, size)
        miss = placed == 0
        cur["kernel_bodies"] += int(a[9].shape[0])
        cur["kernel_obstacles"] += int(a[12].shape[0])
        cur["missed"] += int(miss.sum())
        cur["missed_draws"] += int(tries[miss].sum())
        cur["max_tries"] = max(cur["max_tries"], int(attempts.max()) if attempts.size else 0)

    def _wrap(self, mod, name, after):
        fn = getattr(mod, name)

        def wrapped(*a):
            c0, w0 = time.process_time(), time.perf_counter()
            out = fn(*a)
            w, c = time.perf_counter() - w0, time.process_time() - c0
            cur = self._cur
            if self.active and cur is not None:
                cur["kernel_wall"][name] += w
                cur["kernel_cpu"][name] += c
                cur["kernel_calls"][name] += 1
                if after is not None:
                    after(a, out)
            return out

        setattr(mod, name, wrapped)


def run_scene(text: str, steps: int, tmp: Path, name: str) -> tuple[int, str]:
    from parsim.runner import run_config

    cfg = tmp / f"{name}.toml"
    cfg.write_text(text)
    stream = io.StringIO()
    status = run_config(str(cfg), str(tmp / name), steps=steps, overwrite=True, stream=stream)
    return status, stream.getvalue()


def worker(case: dict) -> None:
    placement, steps = case["placement"], case["steps"]
    t_start = time.perf_counter()
    probe = Probe()
    tmp = Path(tempfile.mkdtemp(prefix="bench_rain_"))
    try:
        w0 = time.perf_counter()
        for pl in PLACEMENTS:   # warm-up: both placements, tiny rain, the step kernels
            status, _ = run_scene(scene(pl, count=300, total=600, every=20), 41, tmp,
                                  f"warm_{pl}")
            assert status == 0, status
        warm_s = time.perf_counter() - w0
        gc.collect()
        probe.active = True
        load0 = os.getloadavg()
        c0, r0 = time.process_time(), time.perf_counter()
        status, log = run_scene(scene(placement), steps, tmp, "run")
        run_wall, run_cpu = time.perf_counter() - r0, time.process_time() - c0
        probe.active = False
        assert status == 0, (status, log[-2000:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("RESULT " + json.dumps({
        "placement": placement, "steps": steps, "batches": probe.batches,
        "run_wall_s": run_wall, "run_cpu_s": run_cpu, "warmup_s": warm_s,
        "worker_s": time.perf_counter() - t_start, "loadavg_run_start": load0,
        "loadavg_run_end": os.getloadavg(), "log_tail": log.strip().splitlines()[-3:]}),
        flush=True)


# ==========================================================================================
# driver
# ==========================================================================================
def launch(case: dict, timeout: float = 3600) -> dict:
    py = REPO / ".venv" / "bin" / "python"
    py = py if py.exists() else Path(sys.executable)
    cmd = [str(py), str(Path(__file__).resolve()), "--worker", json.dumps(case)]
    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".numba_cache"))
    env.setdefault("NUMBA_NUM_THREADS", "1")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[7:])
            out["job_s"] = time.perf_counter() - t0
            return out
    raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n"
                       f"{r.stderr[-3000:]}")


BATCH_KEYS = ("pour_wall", "pour_cpu", "kernel_wall_s", "kernel_cpu_s")
COUNT_KEYS = ("step", "requested", "bodies_before", "in_region_before", "placed",
              "kernel_bodies", "kernel_obstacles", "missed", "missed_draws", "max_tries")


def med(vals):
    return statistics.median(vals) if vals else float("nan")


def aggregate(runs: dict) -> list[dict]:
    """Per batch: for each placement the medians, min, max of the times over the repeats and
    the counts (with whether they were the same in every repeat), and the per-pair ratios."""
    nb = min(len(r["batches"]) for pl in PLACEMENTS for r in runs[pl])
    rows = []
    for b in range(nb):
        row = {"batch": b}
        for pl in PLACEMENTS:
            bs = [r["batches"][b] for r in runs[pl]]
            d = {}
            for k in COUNT_KEYS:
                vals = [x[k] for x in bs]
                d[k] = vals[0]
                d[k + "_stable"] = all(v == vals[0] for v in vals)
            for k in BATCH_KEYS:
                vals = [x[k] for x in bs]
                d[k] = med(vals)
                d[k + "_min"], d[k + "_max"], d[k + "_all"] = min(vals), max(vals), vals
            for k in ("kernel_wall", "kernel_cpu"):
                d[k] = {n: med([x[k][n] for x in bs]) for n in Probe.KERNELS}
            d["mean_draws_missed"] = d["missed_draws"] / d["missed"] if d["missed"] else 0.0
            row[pl] = d
        g, loc = runs["global"], runs["local"]
        for k in BATCH_KEYS:
            rat = [lr["batches"][b][k] / gr["batches"][b][k]
                   for gr, lr in zip(g, loc) if gr["batches"][b][k] > 0]
            row["ratio_" + k] = {"median": med(rat), "min": min(rat) if rat else float("nan"),
                                 "max": max(rat) if rat else float("nan"), "all": rat}
        rows.append(row)
    return rows


def _t(d, k):
    if d[k + "_min"] == d[k + "_max"]:
        return f"{d[k]:.3f}"
    return f"{d[k]:.3f} ({d[k + '_min']:.3f}-{d[k + '_max']:.3f})"


def _r(row, k):
    r = row["ratio_" + k]
    if r["min"] == r["max"]:
        return f"{r['median']:.2f}"
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def _n(d, k):
    return f"{d[k]:,}" + ("" if d[k + "_stable"] else "*")


HEAD = ["batch", "step", "bodies before: sim (in region), global / local",
        "placed of requested: global / local",
        "pour wall [s] global", "pour wall [s] local", "pour local/global",
        "kernel wall [s] global (_rsa)", "kernel wall [s] local (room+fill)",
        "kernel local/global", "kernel CPU local/global"]


def rows_of(table):
    out = []
    for row in table:
        g, loc = row["global"], row["local"]
        out.append([
            str(row["batch"]), str(g["step"]),
            f"{_n(g, 'bodies_before')} ({_n(g, 'in_region_before')}) / "
            f"{_n(loc, 'bodies_before')} ({_n(loc, 'in_region_before')})",
            f"{_n(g, 'placed')} / {_n(loc, 'placed')} of {g['requested']:,}",
            _t(g, "pour_wall"), _t(loc, "pour_wall"), _r(row, "pour_wall"),
            _t(g, "kernel_wall_s"), _t(loc, "kernel_wall_s"), _r(row, "kernel_wall_s"),
            _r(row, "kernel_cpu_s")])
    return out


HEAD2 = ["batch", "kernel bodies / obstacles: global", "kernel bodies / obstacles: local",
         "not placed: global / local", "draws per unplaced body: global / local",
         "kernel CPU [s]: global / local", "room / fill wall [s] (local)",
         "pour minus kernel wall [s]: global / local"]


def rows2_of(table):
    out = []
    for row in table:
        g, loc = row["global"], row["local"]
        out.append([
            str(row["batch"]),
            f"{g['kernel_bodies']:,} / {g['kernel_obstacles']:,}",
            f"{loc['kernel_bodies']:,} / {loc['kernel_obstacles']:,}",
            f"{g['missed']:,} / {loc['missed']:,}",
            f"{g['mean_draws_missed']:,.0f} / {loc['mean_draws_missed']:,.0f}",
            f"{g['kernel_cpu_s']:.3f} / {loc['kernel_cpu_s']:.3f}",
            f"{loc['kernel_wall']['room']:.3f} / {loc['kernel_wall']['fill']:.3f}",
            f"{g['pour_wall'] - g['kernel_wall_s']:.3f} / "
            f"{loc['pour_wall'] - loc['kernel_wall_s']:.3f}"])
    return out


def plot(table, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    colours = {"global": "C3", "local": "C0"}
    for pl in PLACEMENTS:
        x = np.array([row["batch"] for row in table], float)
        off = -0.06 if pl == "global" else 0.06
        for key, ls, lab in (("pour_wall", "-", "pour"), ("kernel_wall_s", ":", "kernel")):
            y = np.array([row[pl][key] for row in table])
            lo = y - np.array([row[pl][key + "_min"] for row in table])
            hi = np.array([row[pl][key + "_max"] for row in table]) - y
            ax.errorbar(x + off, y, yerr=[lo, hi], color=colours[pl], ls=ls, marker="o",
                        ms=4, capsize=3,
                        label=f"{pl}: {lab} wall time" + (" (_rsa)" if lab == "kernel" and pl ==
                                                         "global" else " (room+fill)" if lab ==
                                                         "kernel" else ""))
    for row in table:
        ax.annotate(f"{row['global']['in_region_before']:,}/{row['local']['in_region_before']:,}",
                    (row["batch"], max(row["local"]["pour_wall"], row["global"]["pour_wall"])),
                    textcoords="offset points",
                    xytext=(0, 8), ha="center", fontsize=7, color="0.35")
    ax.set_yscale("log")
    ax.margins(y=0.15)
    ax.set_xticks([row["batch"] for row in table])
    ax.set_xticklabels([f"{row['batch']}\n(step {row['global']['step']})" for row in table])
    ax.set_xlabel("batch (6,000 each, the last 4,000; labels: bodies in the region before "
                  "it, global/local)")
    ax.set_ylabel("wall time per batch [s] (median, min-max)")
    ax.set_title("rain into a crowding region, 1 rank: placement global vs local", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def reading_of(table, runs) -> str:
    lines = []
    rp = [row["ratio_pour_wall"]["median"] for row in table]
    rk = [row["ratio_kernel_wall_s"]["median"] for row in table]
    rc = [row["ratio_kernel_cpu_s"]["median"] for row in table]
    first = table[0]
    lines.append(
        f"- Pour wall time local / global per batch (median of the {len(runs['global'])} "
        f"side-by-side pairs): {', '.join(f'{x:.2f}' for x in rp)}; kernel wall time: "
        f"{', '.join(f'{x:.2f}' for x in rk)}; kernel CPU time: "
        f"{', '.join(f'{x:.2f}' for x in rc)}.")
    lines.append(
        f"- Into the empty region (batch 0) both place all {first['global']['requested']:,}: "
        f"pour {first['global']['pour_wall']:.3f} s global, {first['local']['pour_wall']:.3f} s "
        "local.")
    for row in table[1:]:
        g, loc = row["global"], row["local"]
        lines.append(
            f"- Batch {row['batch']} (step {g['step']}; {g['in_region_before']:,} / "
            f"{loc['in_region_before']:,} bodies in the region before it, global / local): "
            f"global placed {g['placed']:,} of {g['requested']:,} in {g['pour_wall']:.3f} s "
            f"(_rsa {g['kernel_wall_s']:.3f} s), local {loc['placed']:,} in "
            f"{loc['pour_wall']:.3f} s (room + fill {loc['kernel_wall_s']:.3f} s; "
            f"{loc['missed']:,} bodies found no place after {loc['mean_draws_missed']:,.0f} "
            f"draws each on average; global's {g['missed']:,} after {g['max_tries']} each).")
    tg = sum(row["global"]["pour_wall"] for row in table)
    tl = sum(row["local"]["pour_wall"] for row in table)
    pg = sum(row["global"]["placed"] for row in table)
    pl_ = sum(row["local"]["placed"] for row in table)
    lines.append(
        f"- All {len(table)} batches: pour wall time (sum of the per-batch medians) global "
        f"{tg:.2f} s, local {tl:.2f} s ({tl / tg:.2f}x); bodies placed global {pg:,}, local "
        f"{pl_:,}. Whole runs ({runs['global'][0]['steps']} steps, pours and steps), wall "
        f"medians: global {med([r['run_wall_s'] for r in runs['global']]):.1f} s, local "
        f"{med([r['run_wall_s'] for r in runs['local']]):.1f} s.")
    kw = [row[pl]["kernel_wall_s"] for row in table for pl in PLACEMENTS]
    kc = [row[pl]["kernel_cpu_s"] for row in table for pl in PLACEMENTS]
    rw = [r["run_wall_s"] for pl in PLACEMENTS for r in runs[pl]]
    rcpu = [r["run_cpu_s"] for pl in PLACEMENTS for r in runs[pl]]
    lines.append(
        f"- The kernels run on one thread, yet their wall time (sum over batches and placements "
        f"of the medians) was {sum(kw):.1f} s against {sum(kc):.1f} s of CPU time (the load "
        "average is in the header: more runnable jobs than the 2 cores); "
        f"whole runs {min(rw):.0f}-{max(rw):.0f} s wall for {min(rcpu):.0f}-{max(rcpu):.0f} s "
        "CPU. The per-pair wall ratios spread accordingly (min-max in the table); the CPU ratio "
        "of the kernels spreads less: "
        + ", ".join(f"{row['ratio_kernel_cpu_s']['min']:.2f}-{row['ratio_kernel_cpu_s']['max']:.2f}"
                    for row in table) + ".")
    diff = [row for row in table
            if abs(row["local"]["in_region_before"] - row["global"]["in_region_before"])
            > 0.1 * max(row["global"]["in_region_before"], 1)]
    if diff:
        lines.append(
            "- The two runs do not crowd the region alike: before batches "
            + ", ".join(str(row["batch"]) for row in diff) + " the region held "
            + ", ".join(f"{row['global']['in_region_before']:,} (global) / "
                        f"{row['local']['in_region_before']:,} (local)" for row in diff)
            + " bodies, so from there on the ratio compares pours into regions of different "
            "crowding (and the local kernel was given more obstacles: see the second table).")
    unstable = [f"{pl} batch {row['batch']}" for row in table for pl in PLACEMENTS
                if not all(row[pl][k + "_stable"] for k in COUNT_KEYS)]
    lines.append("- The counts (bodies before, placed, kernel inputs) were the same in every "
                 "repeat" + ("." if not unstable else
                             f" except in {', '.join(unstable)} (marked *; first repeat shown)."))
    return "\n".join(lines)


def report(table, runs, info, cmd, out: Path) -> str:
    v = info["versions"]
    n_rep = len(runs["global"])
    md = f"""# Rain benchmark: pouring into a crowded region, `placement = "global"` vs `"local"`

Produced by `{cmd}` ({info['date_utc']}, git {info.get('git_head', '?')}).
Machine: {info['cpu_model']}, {info['cpus']} CPUs, {info['mem_gib']} GiB, {info['os']}
(shared with other jobs; load average at the start {', '.join(f'{x:.2f}' for x in
info['loadavg_start'])}, at the end {', '.join(f'{x:.2f}' for x in info.get('loadavg_end', []))}).
Python {v['python']}, numpy {v['numpy']}, numba {v['numba']}. One rank, NUMBA_NUM_THREADS=1.

## What is measured

The scene embedded in `scripts/bench_rain.py`: lognormal steel spheres (radius 5 mm, sigma
0.25) raining in batches of 6,000 every 400 steps (total 40,000) into the region
[0.01, 0.49]^2 x [0.45, 0.59] m of a walled 0.5 x 0.5 x 0.6 m box at 0.5 m/s (+-0.1), dt 5e-5,
seed 7; once with `placement = "global"` (serial random sequential addition of the batch,
`parsim.config._rsa`, 200 attempts per body) and once with `"local"` (`parsim/packing.py`:
RSA in cells, `packing.room` + `packing.fill`, 1000 draws per body scaled by up to 64x in
crowded cells). Run by `parsim.runner.run_config(config, out, steps={runs['global'][0]['steps']},
overwrite=True)` on one rank; every batch goes through `parsim.config.pour` (step 0 from
`build`, the others from the runner's loop). The 40,000 are used up by the seventh batch
(6 x 6,000 + 4,000), so there is no later pour.

Each (placement, repeat) is its own process, {n_rep} repeat(s), global and local interleaved
and taking turns at going first; in each process both placements are first run on a tiny
version of the scene (numba cache loads, first calls), then `gc.collect()`, then the measured
run. Timing wrappers replace module attributes (parsim's code is unchanged):

- **bodies before**: finite bodies in the sim before the pour, and in brackets those whose
  centre is in the rain's region (the two placements put different bodies at different places,
  so their runs differ after batch 0).
- **placed of requested**: `pour`'s return value.
- **pour wall**: `perf_counter` around the whole `parsim.config.pour` call (placement, sizes,
  velocities, adding the bodies); median (min-max) over the repeats.
- **kernel wall**: summed over the pour's calls of `parsim.config._rsa` (global) or
  `parsim.packing.room` + `parsim.packing.fill` (local); median (min-max).
- **local/global**: median (min-max) over the repeats of the ratio of repeat i's local run to
  repeat i's global run (adjacent in time). The CPU-time ratio of the kernels
  (`process_time`) is given too, since wall time on this machine includes waiting for a core.
- A `*` marks a count that was not the same in every repeat (the first repeat's is shown).

## Results

{md_table(HEAD, rows_of(table))}

Kernel inputs and misses (first repeat's counts; times medians):

{md_table(HEAD2, rows2_of(table))}

"draws per unplaced body": global: `max_attempts` (200), all used; local: the `attempts` of
the body's generation cell (1000 x up to 64), all used, averaged over the bodies that found no
place. "kernel bodies": local computes the bodies of every cell of the region on one rank
(= requested).

## Reading

{reading_of(table, runs)}

## Raw numbers

`rain.json`: every run, every batch (pour and kernel wall and CPU time per kernel, counts,
the load average around each run). Plot: `rain.png` (pour and kernel wall time per batch,
log scale, min-max bars).

![rain](rain.png)
"""
    (out / "rain.md").write_text(md)
    plot(table, out / "rain.png")
    return md


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=2801,
                   help="steps per run (default 2801; pours every 400 from step 0)")
    p.add_argument("--repeats", type=int, default=3, help="runs per placement (default 3)")
    p.add_argument("--quick", action="store_true", help="--steps 1201 (batches 0-3), 1 repeat")
    p.add_argument("--out", help="report directory (default docs/benchmarks)")
    p.add_argument("--report-from", metavar="JSON",
                   help="only rewrite the report from an earlier run's rain.json")
    a = p.parse_args()
    if a.worker:
        worker(json.loads(a.worker))
        return
    out = Path(a.out) if a.out else REPO / "docs" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    if a.report_from:
        old = json.loads(Path(a.report_from).read_text())
        runs, info, cmd = old["runs"], old["machine"], old["command"]
    else:
        if a.quick:
            a.steps, a.repeats = 1201, 1
        info = machine_info(str(REPO))
        cmd = " ".join(["PYTHONPATH=. NUMBA_CACHE_DIR=.numba_cache NUMBA_NUM_THREADS=1 "
                        ".venv/bin/python scripts/bench_rain.py", *sys.argv[1:]])
        runs = {pl: [] for pl in PLACEMENTS}
        t0 = time.perf_counter()
        for rep in range(a.repeats):
            order = list(PLACEMENTS) if rep % 2 == 0 else list(PLACEMENTS)[::-1]
            for pl in order:
                print(f"[{time.perf_counter() - t0:6.1f} s] run {rep + 1}/{a.repeats}: {pl}, "
                      f"{a.steps} steps (load {os.getloadavg()[0]:.2f})", flush=True)
                r = launch({"placement": pl, "steps": a.steps})
                r["repeat"], r["first_of_pair"] = rep, order.index(pl) == 0
                runs[pl].append(r)
                for b in r["batches"]:
                    print(f"    batch {b['batch']} step {b['step']:5d}: before "
                          f"{b['bodies_before']:6,} ({b['in_region_before']:6,} in region), "
                          f"placed {b['placed']:5,}/{b['requested']:,}, pour "
                          f"{b['pour_wall']:7.3f} s, kernel {b['kernel_wall_s']:7.3f} s "
                          f"(CPU {b['kernel_cpu_s']:7.3f} s)", flush=True)
                print(f"    run {r['run_wall_s']:.1f} s wall, {r['run_cpu_s']:.1f} s CPU",
                      flush=True)
        info["loadavg_end"] = os.getloadavg()
        info["driver_wall_s"] = time.perf_counter() - t0
    table = aggregate(runs)
    print()
    print(text_table(HEAD, rows_of(table), "rain into a crowding region: global vs local"))
    print()
    print(text_table(HEAD2, rows2_of(table), "kernel inputs and misses"))
    print()
    print(reading_of(table, runs))
    report(table, runs, info, cmd, out)
    (out / "rain.json").write_text(json.dumps({"machine": info, "command": cmd,
                                               "scene": SCENE, "table": table, "runs": runs},
                                              indent=1))
    print(f"\nwrote {out / 'rain.md'}, rain.json, rain.png")


if __name__ == "__main__":
    main()
