#!/usr/bin/env python3
"""Analysis of a parsim run from its HDF5 output: energy, contacts, packing, load, timings.

    python scripts/analyze_run.py DIR [--out OUTDIR] [--bins N] [--step STEP] [--density NAME=RHO]

``DIR`` is a run directory (``parsim run ... --output DIR``). It is read through the public reader
``parsim.io.open_run``; the per-snapshot attributes ``n_contacts`` and ``counts`` and the material
names are read from ``DIR/snapshots.h5`` with h5py (read-only). Writes to ``OUTDIR`` (default
``DIR/analysis``):

``energy.png``     kinetic energy (translational, rotational, total) and contacts over time
``packing.png``    solid volume fraction vs height along -gravity at the last snapshot (or
                   ``--step``), with the bed bottom, the bed surface and the bed/bulk fractions
``load.png``       bodies per rank over time (from the ``rank`` field) and the max/mean imbalance
``timings.png``    per-phase seconds, min/mean/max over the ranks (if the run stored timings)
``timeseries.csv`` step, time, energies, contacts, bodies per rank
``profile.csv``    the height profile
``summary.txt``    the text summary (also printed)

Planes (shape 3) are excluded from every body statistic. Masses are density x volume with the
densities the file stores (``/materials`` attribute ``density``) or, in older files, those of the
config's ``[[materials]]`` tables; ``--density NAME=RHO`` overrides one (NAME must be a material
of the run). The domain and gravity come from the file's attributes (``domain_lo``,
``domain_hi``, ``gravity``) or, in older files, from the config; a file with neither (written by
a script before they were stored) gets no packing analysis and the summary says why.
Definitions and approximations: ``docs/analysis.md``.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import tomllib
from pathlib import Path

import numpy as np

SPHERE, BOX, CAPSULE, PLANE = 0, 1, 2, 3
SHAPE_NAMES = ("sphere", "box", "capsule", "plane")


# ---------------------------------------------------------------------------------------------
# mass properties and kinetic energy

def volumes(shape: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Volume of every finite body (planes: 0)."""
    v = np.zeros(shape.shape[0])
    s = shape == SPHERE
    v[s] = 4.0 / 3.0 * math.pi * params[s, 0] ** 3
    b = shape == BOX
    v[b] = 8.0 * params[b, 0] * params[b, 1] * params[b, 2]
    c = shape == CAPSULE
    r, h = params[c, 0], params[c, 1]
    v[c] = math.pi * r * r * 2.0 * h + 4.0 / 3.0 * math.pi * r ** 3
    return v


def principal_inertia(shape: np.ndarray, params: np.ndarray, density: np.ndarray) -> np.ndarray:
    """(n, 3) body-frame principal moments of inertia (the body axes are the principal axes),
    the same formulas as ``parsim.shapes.mass_properties``."""
    inertia = np.zeros((shape.shape[0], 3))
    s = shape == SPHERE
    r = params[s, 0]
    m = density[s] * 4.0 / 3.0 * math.pi * r ** 3
    inertia[s] = (0.4 * m * r * r)[:, None]
    b = shape == BOX
    a, bb, c = params[b, 0], params[b, 1], params[b, 2]
    m = density[b] * 8.0 * a * bb * c
    inertia[b] = np.stack([bb * bb + c * c, a * a + c * c, a * a + bb * bb], axis=1) * (m / 3.0)[:, None]
    c = shape == CAPSULE
    r, h = params[c, 0], params[c, 1]
    m_cyl = density[c] * math.pi * r * r * 2.0 * h
    m_sph = density[c] * 4.0 / 3.0 * math.pi * r ** 3
    axial = m_cyl * r * r / 2.0 + m_sph * 0.4 * r * r
    transverse = m_cyl * ((2.0 * h) ** 2 / 12.0 + r * r / 4.0) + m_sph * (0.4 * r * r + h * h + 0.75 * h * r)
    inertia[c] = np.stack([axial, transverse, transverse], axis=1)
    return inertia


def rotation_matrices(q: np.ndarray) -> np.ndarray:
    """(n, 3, 3) rotation matrices (body -> world) of unit quaternions (w, x, y, z)."""
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], axis=1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], axis=1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], axis=1),
    ], axis=1)


def kinetic_energy(snap: dict, density_of_material: np.ndarray) -> tuple[float, float]:
    """(translational, rotational) kinetic energy of the finite bodies of a snapshot. Rotational:
    1/2 sum_k I_k w_k^2 with w in the body (principal) frame, w_body = R^T w_world."""
    keep = snap["shape"] != PLANE
    shape, params = snap["shape"][keep], snap["params"][keep]
    rho = density_of_material[snap["material"][keep]]
    m = rho * volumes(shape, params)
    v = snap["velocity"][keep]
    w = snap["angular_velocity"][keep]
    trans = 0.5 * float(np.sum(m * np.einsum("ij,ij->i", v, v)))
    inertia = principal_inertia(shape, params, rho)
    w_body = np.einsum("nji,nj->ni", rotation_matrices(snap["orientation"][keep]), w)
    rot = 0.5 * float(np.sum(inertia * w_body * w_body))
    return trans, rot


# ---------------------------------------------------------------------------------------------
# solid volume along the gravity axis

def _sphere_volume_below(t, c, r):
    """Volume of the ball (centre height c, radius r) below height t (elementwise)."""
    u = np.clip(t - (c - r), 0.0, 2.0 * r)          # height of the cap below t
    return math.pi * u * u * (3.0 * r - u) / 3.0


def _unit_grid(m: int) -> np.ndarray:
    """Cell centres of an m x m x m grid on [-1, 1]^3."""
    g = (np.arange(m) + 0.5) / m * 2.0 - 1.0
    return np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)


def _sample_heights(shape, params, orient, height, up, m=8):
    """Heights and volume weights of quadrature points filling each box / capsule (the
    approximation for non-spherical bodies): an m^3 grid of cell centres, rotated with the body.
    Yields (heights (n, p), weights (n, p)) per shape group."""
    up_body = np.einsum("nji,j->ni", rotation_matrices(orient), up)     # R^T up, per body
    grid = _unit_grid(m)
    b = shape == BOX
    if b.any():
        # point height = centre + sum_k g_k a_k (R^T up)_k
        coef = params[b] * up_body[b]                                  # (n, 3)
        hts = height[b, None] + coef @ grid.T                          # (n, p)
        wts = np.repeat((8.0 * np.prod(params[b], axis=1) / grid.shape[0])[:, None],
                        grid.shape[0], axis=1)
        yield hts, wts
    c = shape == CAPSULE
    if c.any():
        r, h, ub, hc = params[c, 0], params[c, 1], up_body[c], height[c]
        # cylinder: axial coordinate x = g0 * h, cross-section points of the unit disk * r
        g = (np.arange(m) + 0.5) / m * 2.0 - 1.0
        disk = np.stack(np.meshgrid(g, g, indexing="ij"), axis=-1).reshape(-1, 2)
        disk = disk[np.einsum("ij,ij->i", disk, disk) <= 1.0]
        ax = np.repeat(g, disk.shape[0])
        cross = np.tile(disk, (m, 1))
        hts = (hc[:, None] + (h * ub[:, 0])[:, None] * ax[None, :]
               + r[:, None] * (cross @ ub[:, 1:].T).T)
        wts = np.repeat((math.pi * r * r * 2.0 * h / ax.size)[:, None], ax.size, axis=1)
        yield hts, wts
        # the two hemispheres: points of the unit ball with x > 0, scaled by r, moved to +-h
        ball = grid[(np.einsum("ij,ij->i", grid, grid) <= 1.0) & (grid[:, 0] > 0)]
        vol = (2.0 / 3.0 * math.pi * r ** 3 / ball.shape[0])[:, None]
        for sign in (1.0, -1.0):
            pts = ball * np.array([sign, 1.0, 1.0])
            hts = (hc[:, None] + (sign * h * ub[:, 0])[:, None]
                   + r[:, None] * (pts @ ub.T).T)
            yield hts, np.repeat(vol, ball.shape[0], axis=1)


class Bodies:
    """The finite bodies of a snapshot seen along the up axis (-gravity)."""

    def __init__(self, snap: dict, up: np.ndarray, origin: float):
        keep = snap["shape"] != PLANE
        self.shape = snap["shape"][keep].astype(np.int64)
        self.params = snap["params"][keep]
        self.orient = snap["orientation"][keep]
        self.position = snap["position"][keep]
        self.up = up
        self.height = self.position @ up - origin
        self.volume = volumes(self.shape, self.params)
        # half extent along up (exact support function of every shape)
        ub = np.einsum("nji,j->ni", rotation_matrices(self.orient), up) if len(self.shape) else \
            np.zeros((0, 3))
        e = np.zeros(self.shape.shape[0])
        s = self.shape == SPHERE
        e[s] = self.params[s, 0]
        b = self.shape == BOX
        e[b] = np.sum(self.params[b] * np.abs(ub[b]), axis=1)
        c = self.shape == CAPSULE
        e[c] = self.params[c, 1] * np.abs(ub[c, 0]) + self.params[c, 0]
        self.extent = e
        bound = np.zeros(self.shape.shape[0])
        bound[s] = self.params[s, 0]
        bound[b] = np.linalg.norm(self.params[b], axis=1)
        bound[c] = self.params[c, 0] + self.params[c, 1]
        self.mean_diameter = float(2.0 * bound.mean()) if bound.size else 0.0

    def _samples(self):
        ns = self.shape != SPHERE
        if ns.any():
            yield from _sample_heights(self.shape[ns], self.params[ns], self.orient[ns],
                                       self.height[ns], self.up)

    def solid_between(self, a: float, b: float) -> float:
        """Solid volume between heights a < b (spheres exact, other shapes sampled)."""
        s = self.shape == SPHERE
        c, r = self.height[s], self.params[s, 0]
        v = float(np.sum(_sphere_volume_below(b, c, r) - _sphere_volume_below(a, c, r)))
        for hts, wts in self._samples():
            v += float(np.sum(wts[(hts >= a) & (hts < b)]))
        return v

    def profile(self, h0: float, width: float, nbins: int) -> np.ndarray:
        """Solid volume in each of nbins bins [h0 + i width, h0 + (i+1) width); volume outside
        the bins is dropped."""
        out = np.zeros(nbins)
        s = self.shape == SPHERE
        if s.any():
            c, r = self.height[s], self.params[s, 0]
            first = np.floor((c - r - h0) / width).astype(np.int64)
            span = int(np.ceil(2.0 * r.max() / width)) + 2
            k = first[:, None] + np.arange(span + 1)[None, :]            # edge indices
            cum = _sphere_volume_below(h0 + k * width, c[:, None], r[:, None])
            part = np.diff(cum, axis=1)                                 # bins k[:, :-1]
            idx = k[:, :-1].ravel()
            ok = (idx >= 0) & (idx < nbins)
            out += np.bincount(idx[ok], weights=part.ravel()[ok], minlength=nbins)
        for hts, wts in self._samples():
            idx = np.floor((hts.ravel() - h0) / width).astype(np.int64)
            ok = (idx >= 0) & (idx < nbins)
            out += np.bincount(idx[ok], weights=wts.ravel()[ok], minlength=nbins)
        return out

    def surface(self, e1: np.ndarray, e2: np.ndarray) -> tuple[float, float]:
        """(bed bottom, bed surface): the lowest point of any body, and the median over
        horizontal columns (side 2 mean diameters) of the highest body top in each column."""
        if not self.shape.size:
            return math.nan, math.nan
        bottom = float(np.min(self.height - self.extent))
        top = self.height + self.extent
        cell = max(2.0 * self.mean_diameter, 1e-300)
        x, y = self.position @ e1, self.position @ e2
        ix = np.floor((x - x.min()) / cell).astype(np.int64)
        iy = np.floor((y - y.min()) / cell).astype(np.int64)
        col = ix * (iy.max() + 1) + iy
        tops = np.full(col.max() + 1, -np.inf)
        np.maximum.at(tops, col, top)
        return bottom, float(np.median(tops[np.isfinite(tops)]))


# ---------------------------------------------------------------------------------------------
# the run

def _read_config(run) -> dict:
    try:
        return tomllib.loads(run.config or "")
    except tomllib.TOMLDecodeError as e:
        raise SystemExit(f"analyze_run: the run's stored config is not valid TOML: {e}") from None


def _densities(cfg: dict, names: list[str], extra: dict, stored: dict | None) -> np.ndarray:
    """Density of every material of the run: the file's (``stored``), else the config's;
    ``extra`` (--density) overrides, and must name materials of the run."""
    unknown = [n for n in extra if n not in names]
    if unknown:
        raise SystemExit(f"analyze_run: --density: unknown material(s) "
                         f"{', '.join(repr(n) for n in unknown)} (the run's materials: "
                         f"{', '.join(names) if names else 'none'})")
    table = dict(stored or {})
    table.update({m.get("name"): float(m["density"]) for m in cfg.get("materials", [])
                  if "density" in m})
    table.update(extra)
    missing = [n for n in names if n not in table]
    if missing:
        raise SystemExit(f"analyze_run: no density for material(s) {missing} (neither the file "
                         f"nor its config gives one: it has {sorted(table)}); pass "
                         "--density NAME=RHO")
    return np.array([table[n] for n in names], dtype=np.float64)


def _full_config(cfg: dict) -> bool:
    """Whether the stored config text is a run's config (``parsim run``: it always has a
    [domain] with lo and hi), whose defaults (no gravity) are the run's."""
    dom = cfg.get("domain")
    return isinstance(dom, dict) and "lo" in dom and "hi" in dom


def _domain(cfg: dict, stored):
    """((lo, hi), None) of the run's domain, or (None, why there is none): the file's
    attributes, else the config's [domain]."""
    if stored is not None:
        lo, hi, _ = stored
        bad = [a for k, a in enumerate("xyz") if not (np.isfinite(lo[k]) and np.isfinite(hi[k]))]
        if bad:
            return None, (f"the run's domain is unbounded along {', '.join(bad)}, so there is "
                          "no cross-section to divide by")
        return (lo, hi), None
    if _full_config(cfg):
        dom = cfg["domain"]
        return (np.asarray(dom["lo"], float), np.asarray(dom["hi"], float)), None
    return None, ("the run's domain is unknown: the file has no domain attributes (written "
                  "before parsim stored them) and no config with a [domain] table")


def _gravity(cfg: dict, stored):
    """The run's gravity vector (the file's attribute, else a run config's), None if unknown."""
    if stored is not None:
        return stored
    if _full_config(cfg):
        return np.asarray(cfg.get("simulation", {}).get("gravity", [0.0, 0.0, 0.0]), float)
    return None


def _gravity_frame(g):
    """(up unit vector, note on the axis ('' when gravity gives it), two horizontal unit
    vectors, axis name, along an axis?) for the gravity vector g (None: unknown)."""
    g = np.zeros(3) if g is None else np.asarray(g, float)
    norm = float(np.linalg.norm(g))
    up = -g / norm if norm > 0 else np.array([0.0, 0.0, 1.0])
    a = int(np.argmax(np.abs(up)))
    axis_aligned = bool(np.isclose(abs(up[a]), 1.0))
    name = ("+" if up[a] > 0 else "-") + "xyz"[a] if axis_aligned else \
        "(" + ", ".join(f"{u:.3g}" for u in up) + ")"
    helper = np.eye(3)[(a + 1) % 3]
    e1 = np.cross(up, helper)
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(up, e1)
    return up, e1, e2, name, axis_aligned


def analyze(run_dir, out_dir=None, nbins: int | None = None, step: int | None = None,
            extra_density: dict | None = None, quiet: bool = False) -> dict:
    """Analyse the run in ``run_dir``, write plots, CSV files and ``summary.txt`` to ``out_dir``
    (default ``run_dir/analysis``); return the numbers (see ``docs/analysis.md``)."""
    import h5py

    import parsim.io

    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "analysis"
    run = parsim.io.open_run(run_dir)      # not a run: an error before anything is made
    out.mkdir(parents=True, exist_ok=True)
    try:
        steps = run.steps
        if not steps:
            raise SystemExit(f"analyze_run: {run.path} holds no snapshot")
        cfg = _read_config(run)
        timings = run.timings
        stored_domain, stored_gravity, stored_density = run.domain, run.gravity, run.densities
        with h5py.File(run.path, "r") as f:
            names = (list(f["materials"]["names"].asstr()[()]) if "materials" in f
                     else [m["name"] for m in cfg.get("materials", [])])
            attrs = [dict(f["snapshots"][f"{s:010d}"].attrs) for s in steps]
        rho = _densities(cfg, names, extra_density or {}, stored_density)
        n_ranks = max(int(a.get("ranks", 1)) for a in attrs)

        # --- time series
        rows = []
        last = None
        for s, a in zip(steps, attrs):
            snap = run.snapshot(s)
            trans, rot = kinetic_energy(snap, rho)
            finite = snap["shape"] != PLANE
            per_rank = np.bincount(snap["rank"][finite].astype(np.int64), minlength=n_ranks)
            shapes = np.bincount(snap["shape"][finite].astype(np.int64), minlength=3)
            rows.append(dict(step=s, time=float(snap["time"]), ke_trans=trans, ke_rot=rot,
                             ke=trans + rot, n_contacts=int(a.get("n_contacts", -1)),
                             n_bodies=int(finite.sum()), per_rank=per_rank,
                             counts_attr=np.asarray(a.get("counts", [])), shapes=shapes,
                             status=str(snap["status"])))
            if step is None or s == step:
                last = snap
        if step is not None and last is None:
            raise SystemExit(f"analyze_run: no snapshot at step {step} (steps: {steps})")
    finally:
        run.close()

    # --- packing at the last (or the chosen) snapshot
    g = _gravity(cfg, stored_gravity)
    up, e1, e2, axis_name, axis_aligned = _gravity_frame(g)
    gravity_note = ("" if g is not None and np.any(g != 0) else
                    " (no gravity in the run: z axis used)" if g is not None else
                    " (gravity unknown: the file has no gravity attribute (written before "
                    "parsim stored it) and no run config; z axis used)")
    box, no_packing = _domain(cfg, stored_domain)
    if box is not None:
        lo, hi = box
        corners = np.array([[(lo, hi)[(i >> k) & 1][k] for k in range(3)] for i in range(8)])
        ch = corners @ up
        origin, height_range = float(ch.min()), float(ch.max() - ch.min())
        # cross-section perpendicular to up: exact for an axis-aligned gravity
        area = float(np.prod(hi - lo)) / height_range
    else:
        origin, height_range, area = 0.0, math.nan, math.nan
    bodies = Bodies(last, up, origin)
    total_solid = float(bodies.volume.sum())
    d = bodies.mean_diameter
    if box is not None:
        if nbins is None:
            width0 = d / 4.0 if d > 0 else height_range / 200
            nbins = int(np.clip(round(height_range / width0), 20, 5000))
        width = height_range / nbins
        solid = bodies.profile(0.0, width, nbins)
        phi = solid / (area * width)
        centres = (np.arange(nbins) + 0.5) * width
        bottom, top = bodies.surface(e1, e2)
        phi_bed = bodies.solid_between(bottom, top) / (area * (top - bottom)) \
            if top > bottom else math.nan
        phi_bulk = (bodies.solid_between(bottom + d, top - d) / (area * (top - bottom - 2 * d))
                    if top - bottom > 3 * d else math.nan)
    else:                     # no packing analysis: the summary says why
        nbins, width, bottom, top, phi_bed, phi_bulk = 0, math.nan, math.nan, math.nan, \
            math.nan, math.nan
        solid, phi, centres = np.zeros(0), np.zeros(0), np.zeros(0)

    # --- arrays
    step_arr = np.array([r["step"] for r in rows])
    t = np.array([r["time"] for r in rows])
    ke_t = np.array([r["ke_trans"] for r in rows])
    ke_r = np.array([r["ke_rot"] for r in rows])
    nc = np.array([r["n_contacts"] for r in rows])
    per_rank = np.array([r["per_rank"][:n_ranks] if r["per_rank"].size >= n_ranks else
                         np.pad(r["per_rank"], (0, n_ranks - r["per_rank"].size))
                         for r in rows])
    nb = np.array([r["n_bodies"] for r in rows])
    # each snapshot's own rank count (a restart may change it): the mean load is over those
    snap_ranks = np.array([max(int(a.get("ranks", 1)), 1) for a in attrs])
    result = dict(steps=step_arr, time=t, ke_trans=ke_t, ke_rot=ke_r, ke=ke_t + ke_r,
                  n_contacts=nc, n_bodies=nb, per_rank=per_rank, n_ranks=n_ranks,
                  snap_ranks=snap_ranks,
                  counts_attr=[r["counts_attr"] for r in rows],
                  profile_step=int(last["step"]), profile_centres=centres, profile_phi=phi,
                  bin_width=width, area=area, up=up, bed_bottom=bottom, bed_top=top,
                  phi_bed=phi_bed, phi_bulk=phi_bulk, mean_diameter=d,
                  solid_in_bins=float(solid.sum()), solid_total=total_solid,
                  gravity=g, no_packing=no_packing, timings=timings, out=out)

    # --- files
    with open(out / "timeseries.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "time", "ke_trans", "ke_rot", "ke", "n_contacts", "n_bodies"]
                   + [f"bodies_rank{r}" for r in range(n_ranks)])
        for i, r in enumerate(rows):
            w.writerow([int(r["step"]), _num(r["time"]), _num(r["ke_trans"]),
                        _num(r["ke_rot"]), _num(r["ke"]), int(r["n_contacts"]),
                        int(r["n_bodies"])] + [int(c) for c in per_rank[i]])
    with open(out / "profile.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["height_lo", "height_hi", "solid_volume", "phi"])
        for i in range(nbins):
            w.writerow([_num(i * width), _num((i + 1) * width), _num(solid[i]), _num(phi[i])])
    result["files"] = _plots(result, rows, axis_name, gravity_note, out)

    # --- summary
    text = _summary(run_dir, result, rows, axis_name, gravity_note, axis_aligned, nbins)
    (out / "summary.txt").write_text(text)
    result["summary"] = text
    if not quiet:
        print(text, end="")
    return result


def _num(x) -> str:
    """A number for the CSV files: the shortest text that reads back as the same float64
    (``repr`` of a numpy scalar is ``np.float64(...)`` since numpy 2)."""
    return repr(float(x))


def _plots(res, rows, axis_name, gravity_note, out) -> list[Path]:
    try:
        import matplotlib
    except ImportError:
        print("analyze_run: matplotlib is not installed, so no plots (the numbers are in the CSV "
              "files); install it with `pip install matplotlib` or parsim's `bench` extra",
              file=sys.stderr)
        return []

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    t = res["time"]

    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(7, 6))
    for y, label in ((res["ke"], "total"), (res["ke_trans"], "translational"),
                     (res["ke_rot"], "rotational")):
        ax1.plot(t, y, marker=".", label=label)
    if np.all(res["ke"] > 0) and res["ke"].max() > 100 * res["ke"].min():
        ax1.set_yscale("log")
    ax1.set_ylabel("kinetic energy [J]")
    ax1.legend()
    ax1.set_title("kinetic energy of the bodies (planes excluded)")
    ax2.plot(t, res["n_contacts"], marker=".", color="k")
    ax2.set_ylabel("contacts")
    ax2.set_xlabel("time [s]")
    fig.tight_layout()
    files.append(out / "energy.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    h, phi = res["profile_centres"], res["profile_phi"]
    if phi.size:                          # else no packing analysis (the summary says why)
        fig, ax = plt.subplots(figsize=(5, 7))
        ax.plot(phi, h, color="C0", lw=1)
        if np.isfinite(res["bed_top"]):
            ax.axhline(res["bed_bottom"], color="0.5", ls=":", label="bed bottom")
            ax.axhline(res["bed_top"], color="0.3", ls="--", label="bed surface")
            ax.axvline(res["phi_bed"], color="C1", ls="--", label=f"bed {res['phi_bed']:.3f}")
            if np.isfinite(res["phi_bulk"]):
                ax.axvline(res["phi_bulk"], color="C2", ls=":",
                           label=f"bulk {res['phi_bulk']:.3f}")
            nz = np.nonzero(phi > 0)[0]
            if nz.size:
                top = min(h[-1] + res["bin_width"] / 2, h[nz[-1]] + 3 * res["mean_diameter"])
                ax.set_ylim(0, max(top, res["bed_top"] * 1.05))
        ax.set_xlim(0, max(0.75, float(phi.max()) * 1.05))
        ax.set_xlabel("solid volume fraction")
        ax.set_ylabel(f"height along {axis_name} [m]" + (
            "" if not gravity_note else " (gravity unknown)" if "unknown" in gravity_note
            else " (no gravity)"))
        ax.set_title(f"step {res['profile_step']}, bins {res['bin_width']:.3g} m")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        files.append(out / "packing.png")
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)

    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(7, 6))
    pr = res["per_rank"]
    for r in range(pr.shape[1]):
        ax1.plot(t, pr[:, r], marker=".", label=f"rank {r}")
    ax1.set_ylabel("bodies")
    ax1.set_title("bodies owned per rank")
    if pr.shape[1] <= 16:
        ax1.legend(fontsize=8, ncol=2)
    mean = pr.sum(axis=1) / res["snap_ranks"]
    imb = np.divide(pr.max(axis=1), mean, out=np.full(mean.shape, np.nan), where=mean > 0)
    ax2.plot(t, imb, marker=".", color="k")
    ax2.set_ylabel("max / mean")
    ax2.set_xlabel("time [s]")
    fig.tight_layout()
    files.append(out / "load.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)

    if res["timings"]:
        phases = list(res["timings"])
        x = np.arange(len(phases))
        fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(phases) + 2), 4.5))
        for i, k in enumerate(("min", "mean", "max")):
            ax.bar(x + (i - 1) * 0.27, [res["timings"][p][k] for p in phases], 0.27, label=k)
        ax.set_xticks(x, phases, rotation=35, ha="right")
        ax.set_ylabel("seconds")
        ax.set_title("time per phase, min/mean/max over the ranks, last run segment")
        ax.legend()
        fig.tight_layout()
        files.append(out / "timings.png")
        fig.savefig(files[-1], dpi=110)
        plt.close(fig)
    return files


def _ranks_text(snap_ranks) -> str:
    """'2 rank(s)', or '2 -> 1 rank(s)' over the snapshots of a run restarted on others."""
    seq = [int(snap_ranks[0])] + [int(b) for a, b in zip(snap_ranks, snap_ranks[1:]) if a != b]
    return " -> ".join(map(str, seq)) + " rank(s)"


def _summary(run_dir, res, rows, axis_name, gravity_note, axis_aligned, nbins) -> str:
    L = []
    first, last = rows[0], rows[-1]
    shp = last["shapes"]
    L.append(f"run {run_dir}: {len(rows)} snapshots, steps {first['step']}..{last['step']}, "
             f"t = {first['time']:.6g}..{last['time']:.6g} s, "
             f"{_ranks_text(res['snap_ranks'])}, last status {last['status']}")
    L.append(f"bodies (planes excluded): {last['n_bodies']} at the last snapshot "
             f"(spheres {shp[0]}, boxes {shp[1]}, capsules {shp[2]})")
    ke = res["ke"]
    i = int(np.argmax(ke))
    L.append("kinetic energy [J]: first {:.6g} (rot {:.3g}), max {:.6g} at t = {:.4g} s, "
             "last {:.6g} (trans {:.6g}, rot {:.6g})".format(
                 ke[0], res["ke_rot"][0], ke[i], res["time"][i], ke[-1], res["ke_trans"][-1],
                 res["ke_rot"][-1]))
    nc = res["n_contacts"]
    L.append(f"contacts: first {nc[0]}, max {nc.max()}, last {nc[-1]}")
    if res["no_packing"]:
        L.append(f"packing: not computed: {res['no_packing']}")
    else:
        L.append(f"packing at step {res['profile_step']} along {axis_name}" + gravity_note
                 + ("" if axis_aligned else
                    " (gravity not along an axis: cross-section approximate)")
                 + f": {nbins} bins of {res['bin_width']:.4g} m")
        L.append(f"  bed bottom {res['bed_bottom']:.5g} m, bed surface {res['bed_top']:.5g} m, "
                 f"mean bounding diameter {res['mean_diameter']:.4g} m")
        L.append(f"  packing fraction: bed {res['phi_bed']:.4f}, bulk (one mean diameter in "
                 f"from bottom and surface) {res['phi_bulk']:.4f}, max of profile "
                 f"{res['profile_phi'].max():.4f}")
        L.append(f"  solid volume in the bins {res['solid_in_bins']:.6g} m^3 of "
                 f"{res['solid_total']:.6g} m^3")
    pr = res["per_rank"]
    mean = pr.sum(axis=1) / res["snap_ranks"]
    imb = np.divide(pr.max(axis=1), mean, out=np.full(mean.shape, np.nan), where=mean > 0)
    L.append(f"load: bodies per rank at the last snapshot "
             f"{pr[-1][: res['snap_ranks'][-1]].tolist()} (sum "
             f"{int(pr[-1].sum())}); max/mean: last {imb[-1]:.3f}, worst {np.nanmax(imb):.3f}"
             f"; 'counts' attribute (with global bodies) {last['counts_attr'].tolist()}")
    if res["timings"]:
        L.append("timings [s] over the ranks (the last run segment: since the start or the "
                 "last restart):")
        L.append(f"  {'phase':<22s} {'min':>9s} {'mean':>9s} {'max':>9s}")
        for k, v in res["timings"].items():
            L.append(f"  {k:<22s} {v['min']:9.3f} {v['mean']:9.3f} {v['max']:9.3f}")
    else:
        L.append("timings: none stored")
    L.append("wrote: " + ", ".join(p.name for p in res["files"])
             + ", timeseries.csv, profile.csv, summary.txt in " + str(res["out"]))
    return "\n".join(L) + "\n"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", help="run directory (holds snapshots.h5)")
    p.add_argument("--out", default=None, help="output directory (default DIR/analysis)")
    p.add_argument("--bins", type=int, default=None,
                   help="height bins over the domain (default: bin width = mean diameter / 4)")
    p.add_argument("--step", type=int, default=None,
                   help="snapshot of the packing profile (default: the last)")
    p.add_argument("--density", action="append", default=[], metavar="NAME=RHO",
                   help="density of a material of the run (overrides the file's / the "
                        "config's)")
    p.add_argument("--quiet", action="store_true", help="do not print the summary")
    a = p.parse_args(argv)
    extra = {}
    for item in a.density:
        name, _, val = item.partition("=")
        try:
            extra[name] = float(val)
        except ValueError:
            p.error(f"--density {item!r}: expected NAME=RHO")
    if a.bins is not None and a.bins < 1:
        p.error("--bins must be >= 1")
    try:
        return analyze(a.dir, a.out, a.bins, a.step, extra, a.quiet)
    except Exception as e:                                  # parsim.io.OutputError and friends
        from parsim.io import OutputError

        if isinstance(e, OutputError):
            raise SystemExit(f"analyze_run: {e}") from None
        raise


if __name__ == "__main__":
    main()
    sys.exit(0)
