"""TOML run configurations: parsing, validation, and building a :class:`parsim.Simulation`.

The layout is documented in ``docs/configs.md``; ``configs/`` holds runnable examples. Every field
is checked, and an error names the file, the field (``[[bodies]][2].radius``) and the allowed
range. Body generators (``[[bodies]]``):

* ``lattice``  - bodies on a simple cubic lattice filling ``region`` with ``spacing``;
* ``random``   - ``count`` bodies at random, non-overlapping (bounding spheres) places in
  ``region`` (random sequential addition);
* ``rain``     - like ``random``, but ``count`` bodies are inserted every ``every`` steps until
  ``total`` have been poured (poured insertion); each batch avoids the bodies already there;
  both with ``placement = "global"`` (every rank makes every body) or ``"local"`` (rank-local
  cells, ``parsim/packing.py``);
* ``file``     - bodies read from an HDF5 or ``.npz`` file (datasets ``position`` and
  ``radius`` or ``diameter``; optional ``velocity``, ``angular_velocity``).

Sizes: spheres ``radius``, boxes ``half_extents``, capsules ``radius`` and ``length``; a
``scale`` distribution multiplies them per body (``{distribution = "uniform", min, max}``,
``{distribution = "lognormal", median, sigma, min, max}``, ``{distribution = "choice", values,
weights}``). Random numbers come from ``[simulation] seed`` and the generator's index, so a
config always produces the same bodies.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numba import njit

from . import packing, randoms
from .bodies import MAX_UID
from .materials import mix_problem
from .shapes import BOX, CAPSULE, PLANE, SPHERE
from .simulation import BlocksTooNarrow, Simulation


class ConfigError(ValueError):
    """A configuration file is malformed; the message names the file and the field."""


SHAPES = ("sphere", "box", "capsule")
KINDS = ("lattice", "random", "rain", "file")


class _Table:
    """A TOML table with the path of its fields for error messages; tracks unknown keys."""

    def __init__(self, data, where: str, src: str):
        if not isinstance(data, dict):
            raise ConfigError(f"{src}: {where} must be a table, got {data!r}")
        self.data, self.where, self.src = data, where, src
        self.used: set[str] = set()

    def err(self, key: str, msg: str) -> ConfigError:
        return ConfigError(f"{self.src}: {self.where}.{key}: {msg}")

    def missing(self, key: str, what: str = "") -> ConfigError:
        """A required field is absent; names a present unknown key that looks like a typo."""
        import difflib

        near = difflib.get_close_matches(key, [k for k in self.data if k not in self.used], 1)
        hint = f" (the table has {near[0]!r}: a typo?)" if near else ""
        return self.err(key, f"is required{what}{hint}")

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default=None):
        self.used.add(key)
        return self.data.get(key, default)

    def number(self, key: str, default=None, low=-math.inf, high=math.inf, low_open=False,
               integer=False):
        self.used.add(key)
        if key not in self.data:
            if default is None:
                raise self.missing(key)
            return default
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
            raise self.err(key, f"must be {'an integer' if integer else 'a number'}, got {v!r}")
        ok = (v > low if low_open else v >= low) and v <= high and math.isfinite(v)
        if not ok:
            lo_b = "(" if low_open else "["
            raise self.err(key, f"= {v!r} is outside the allowed range {lo_b}{low}, {high}]")
        return v

    def vector(self, key: str, default=None, n: int = 3, kind=float):
        self.used.add(key)
        if key not in self.data:
            if default is None:
                raise self.missing(key, f" ({n} values)")
            return np.array(default, dtype=kind)
        v = self.data[key]
        if not isinstance(v, list) or len(v) != n or not all(
                isinstance(x, bool) if kind is bool else
                (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in v):
            raise self.err(key, f"must be a list of {n} {'booleans' if kind is bool else 'numbers'}, got {v!r}")
        if kind is bool and not all(isinstance(x, bool) for x in v):
            raise self.err(key, f"must be a list of {n} booleans (true/false), got {v!r}")
        a = np.array(v, dtype=kind)
        if kind is float and not np.isfinite(a).all():
            raise self.err(key, f"must be finite, got {v!r}")
        return a

    def choice(self, key: str, options, default=None):
        self.used.add(key)
        v = self.data.get(key, default)
        if v is None:
            raise self.missing(key, f" (one of {', '.join(map(repr, options))})")
        if v not in options:
            raise self.err(key, f"= {v!r}; allowed: {', '.join(map(repr, options))}")
        return v

    def string(self, key: str, default=None) -> str:
        self.used.add(key)
        v = self.data.get(key, default)
        if not isinstance(v, str):
            raise self.err(key, f"must be a string, got {v!r}")
        return v

    def boolean(self, key: str, default: bool) -> bool:
        self.used.add(key)
        v = self.data.get(key, default)
        if not isinstance(v, bool):
            raise self.err(key, f"must be true or false, got {v!r}")
        return v

    def done(self) -> None:
        extra = sorted(set(self.data) - self.used)
        if extra:
            raise ConfigError(f"{self.src}: {self.where}: unknown field(s) {', '.join(extra)} "
                              f"(allowed: {', '.join(sorted(self.used))})")


@dataclass
class RainSchedule:
    """Pending poured insertion of one ``rain`` generator."""

    index: int
    every: int
    count: int
    remaining: int
    spec: dict = field(default_factory=dict)


@dataclass
class RunConfig:
    """A validated configuration: the simulation built from it and the run settings."""

    path: str
    text: str
    steps: int
    output_every: int
    progress_every: int
    seed: int
    sim: Simulation
    rains: list
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    notes: list = field(default_factory=list)      #: what to tell the user (rank 0 prints them)
    warnings: list = field(default_factory=list)   #: the setup's warnings (rank 0 prints them)


def load(path, steps: int | None = None) -> RunConfig:
    """Read, validate and build the configuration in ``path``."""
    p = Path(path)
    src = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{src}: cannot read the config file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{src}: not UTF-8 text (byte {e.start}: {e.reason}); a config is a "
                          "TOML file, which must be saved as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{src}: not valid TOML: {e}") from None
    return build(data, src, text, steps, base=p.parent)


def build(data: dict, src: str = "<config>", text: str = "", steps: int | None = None,
          base: Path | None = None, comm="auto", restart: bool = False) -> RunConfig:
    """Validate ``data`` and build the simulation. ``restart``: everything but the bodies
    (walls and generators are validated but add nothing: the checkpoint holds the bodies; the
    rain schedules are made, their state comes from the checkpoint)."""
    top = _Table(data, "", src)
    top.where = "(top level)"
    sim_t = _Table(top.raw("simulation", {}), "[simulation]", src)
    dom_t = _Table(top.raw("domain", {}), "[domain]", src)
    out_t = _Table(top.raw("output", {}), "[output]", src)
    mats = top.raw("materials", [])
    walls = top.raw("walls", [])
    gens = top.raw("bodies", [])
    top.done()

    dt = sim_t.number("dt", low=0.0, low_open=True)
    n_steps = sim_t.number("steps", low=0, integer=True)
    if steps is not None:
        n_steps = int(steps)
    gravity = sim_t.vector("gravity", (0.0, 0.0, 0.0))
    skin = sim_t.number("skin", -1.0, low=0.0) if sim_t.has("skin") else None
    outflow = sim_t.choice("outflow", ("error", "delete"), "error")
    allow = sim_t.boolean("allow_large_dt", False)
    seed = sim_t.number("seed", 0, low=0, integer=True)
    sim_t.done()

    lo = dom_t.vector("lo")
    hi = dom_t.vector("hi")
    if not (hi > lo).all():
        raise dom_t.err("hi", f"must exceed lo on every axis (lo = {lo.tolist()}, hi = {hi.tolist()})")
    periodic = dom_t.vector("periodic", (False, False, False), kind=bool)
    box_walls = dom_t.boolean("walls", False)
    blocks = None
    if dom_t.has("blocks"):
        v = dom_t.raw("blocks")
        if not (isinstance(v, list) and len(v) == 3
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)):
            raise dom_t.err("blocks", f"must be a list of 3 integers >= 1 (blocks per axis), got {v!r}")
        blocks = tuple(v)
    dom_t.done()

    every = out_t.number("every", max(n_steps, 1), low=1, integer=True)
    progress = out_t.number("progress_every", max(n_steps // 20, 1), low=1, integer=True)
    ck_every = out_t.number("checkpoint_every", 0, low=0, integer=True)
    ck_keep = out_t.number("keep_checkpoints", 2, low=1, integer=True)
    out_t.done()

    notes, stored = [], None
    if blocks is not None:
        if comm == "auto":
            from .comm import auto_comm
            comm = auto_comm()
        ranks = 1 if comm is None else comm.Get_size()
        prod = blocks[0] * blocks[1] * blocks[2]
        if prod != ranks and restart:
            # a restart on another rank count cannot keep the blocks of the stored config
            stored, blocks = blocks, None
        elif prod != ranks:
            # (until 2026-11-28 the message repeated the API's: "blocks: = [2, 2, 2]: blocks =
            # [2, 2, 2] must be ...", found by a rank-count fuzzer)
            raise dom_t.err("blocks", f"= {list(blocks)} makes {prod} blocks, but the number of "
                                      f"MPI ranks ({ranks}) must equal the number of blocks: run "
                                      f"on {prod} ranks, give 3 counts whose product is {ranks}, "
                                      "or drop blocks to let parsim choose")
    try:
        sim = Simulation(dt=dt, gravity=gravity, domain=(lo, hi), periodic=periodic, skin=skin,
                         outflow=outflow, allow_large_dt=allow, blocks=blocks, comm=comm)
        if stored is not None:
            notes.append(f"the config's [domain] blocks = {list(stored)} need "
                         f"{stored[0] * stored[1] * stored[2]} rank(s); on {sim.net.size} the "
                         f"restart uses blocks {list(sim.dec.dims)}")
    except ValueError as e:
        raise ConfigError(f"{src}: {e}") from None
    if isinstance(mats, dict):
        raise ConfigError(f"{src}: [materials] must be an array of tables: write [[materials]] "
                          "(double brackets) above each material")
    if not isinstance(mats, list) or not mats:
        raise ConfigError(f"{src}: [[materials]]: at least one material is required")
    material_keys = ("density", "restitution", "collision_time", "stiffness", "damping",
                     "friction", "rolling_friction", "tangential_stiffness_ratio",
                     "tangential_damping_ratio", "model")
    for i, m in enumerate(mats):
        t = _Table(m, f"[[materials]][{i}]", src)
        name = t.string("name")
        kw = {k: (t.string(k) if k == "model" else t.number(k))
              for k in material_keys if t.has(k)}
        t.used.update(material_keys)     # a typo's hint lists every key a material may have
        t.done()
        try:
            sim.add_material(name, **kw)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{src}: [[materials]][{i}]: {e}") from None
    # every pair of materials must mix (a config has no per-pair settings); said here, with the
    # file and the entries, rather than by the first step, which named neither (until
    # 2026-11-28: "... set their pair with set_interaction(a, b, ...)", an API call)
    for j, b in enumerate(sim.materials):
        for i, a in enumerate(sim.materials[:j]):
            why = mix_problem(a, b)
            if why is not None:
                raise ConfigError(
                    f"{src}: [[materials]][{i}] ({a.name!r}) and [[materials]][{j}] "
                    f"({b.name!r}) have {why}, and a config cannot set how such a pair "
                    "interacts: give every material the same model and the same form (a "
                    "script can set the pair with Simulation.set_interaction)")
    first = sim.materials[0].name
    if box_walls and not restart:
        wall_mat = first
        for d in range(3):
            if not periodic[d]:
                n = np.zeros(3)
                n[d] = 1.0
                sim.add_plane(lo, n, wall_mat)
                sim.add_plane(hi, -n, wall_mat)
    if not isinstance(walls, list):
        raise ConfigError(f"{src}: [[walls]] must be an array of tables")
    for i, w in enumerate(walls):
        t = _Table(w, f"[[walls]][{i}]", src)
        point = t.vector("point")
        normal = t.vector("normal")
        mat = t.string("material", first)
        t.done()
        if np.linalg.norm(normal) < 1e-12:
            raise t.err("normal", "must be a non-zero vector")
        if not restart:
            _add(t, "material", lambda: sim.add_plane(point, normal, mat))
    rng_root = np.random.SeedSequence(seed)
    if not isinstance(gens, list):
        raise ConfigError(f"{src}: [[bodies]] must be an array of tables")
    rains = []
    children = rng_root.spawn(max(len(gens), 1))
    for i, g in enumerate(gens):
        t = _Table(g, f"[[bodies]][{i}]", src)
        if restart and t.raw("kind") != "rain":
            continue                           # only pours carry state into a restart
        spec = _generator_spec(t, sim, base)
        rng = np.random.default_rng(children[i])
        spec["rng"] = rng
        if spec["kind"] == "rain":
            rains.append(RainSchedule(i, spec["every"], spec["count"], spec["total"], spec))
            if not restart:
                asked = min(spec["count"], spec["total"])
                placed = pour(sim, rains[-1], t)
                if placed < asked:
                    notes.append(f"rain {spec['where']} at step 0: placed {placed} of {asked} "
                                 "(the region is crowded; the shortfall is not made up later)")
        else:
            note = _generate(sim, spec, t)
            if note:
                notes.append(note)
    if not restart:
        st = sim.st
        planes = int(np.count_nonzero(st.shape[: st.n_owned] == PLANE))  # on every rank alike
        if sim.count_bodies() == planes:
            raise ConfigError(f"{src}: the configuration creates no bodies (walls aside); add a "
                              "[[bodies]] generator")
    return RunConfig(src, text, n_steps, every, progress, seed, sim, rains, ck_every, ck_keep,
                     notes)


def _add(t: _Table, key: str, fn):
    try:
        return fn()
    except BlocksTooNarrow as e:        # a config's generators cannot make global bodies
        raise t.err(key, f"{e.what}; set [domain] blocks with fewer blocks along the cut axes, "
                         "or run on fewer ranks") from None
    except ValueError as e:
        raise t.err(key, str(e)) from None


def _distribution(t: _Table, key: str):
    """A size-scale distribution: returns f(rng, n) -> float[n] (or None if absent)."""
    if not t.has(key):
        t.used.add(key)
        return None
    d = _Table(t.raw(key), f"{t.where}.{key}", t.src)
    kind = d.choice("distribution", ("uniform", "lognormal", "choice"))
    if kind == "uniform":
        a = d.number("min", low=0.0, low_open=True)
        b = d.number("max", low=a)
        d.done()
        return _Scale(lambda rng, n: rng.uniform(a, b, n),
                      lambda key, i: a + (b - a) * randoms.uniform(key, i, 0, _S_SCALE))
    if kind == "lognormal":
        med = d.number("median", low=0.0, low_open=True)
        sig = d.number("sigma", low=0.0)
        a = d.number("min", med * 1e-3, low=0.0, low_open=True)
        b = d.number("max", med * 1e3, low=a)
        if not a <= med <= b:        # half the sizes or more would sit on a bound
            raise d.err("median", f"= {med!r} lies outside [min, max] = [{a!r}, {b!r}]: the "
                                  "sizes are clipped to that range, so at least half of them "
                                  "would equal a bound; choose a median within it")
        d.done()
        return _Scale(lambda rng, n: np.clip(med * np.exp(sig * rng.standard_normal(n)), a, b),
                      lambda key, i: np.clip(med * np.exp(sig * randoms.normal(key, i, _S_SCALE)),
                                             a, b))
    vals = d.raw("values")
    w = d.raw("weights", None)
    d.done()
    if not isinstance(vals, list) or not vals or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in vals):
        raise d.err("values", f"must be a non-empty list of numbers > 0, got {vals!r}")
    if w is None:
        w = [1.0] * len(vals)
    if not isinstance(w, list) or len(w) != len(vals) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in w) \
            or sum(w) <= 0:
        raise d.err("weights", f"must be {len(vals)} numbers >= 0 with a positive sum, got {w!r}")
    p = np.array(w, float) / sum(w)
    v = np.array(vals, float)
    cum = np.cumsum(p)

    def pick(key, i):
        k = np.searchsorted(cum, randoms.uniform(key, i, 0, _S_SCALE), side="right")
        return v[np.minimum(k, v.size - 1)]

    return _Scale(lambda rng, n: rng.choice(v, size=n, p=p), pick)


@dataclass
class _Scale:
    """A size-scale distribution: ``draw(rng, n)`` (sequential generators) and
    ``hashed(key, index)`` (counter-based, per body index: the lattice generator)."""
    draw: object
    hashed: object

    def __call__(self, rng, n):
        return self.draw(rng, n)


# streams of the counter-based draws of the lattice generator (parsim/randoms.py)
_S_SCALE, _S_JITTER, _S_VELOCITY, _S_ORIENT = 0, 1, 4, 7


def _generator_spec(t: _Table, sim: Simulation, base) -> dict:
    kind = t.choice("kind", KINDS)
    shape = t.choice("shape", SHAPES, "sphere")
    mat = t.string("material", sim.materials[0].name)
    try:
        sim._material(mat)
    except ValueError as e:
        raise t.err("material", str(e)) from None
    spec = dict(kind=kind, shape=shape, material=mat, where=t.where)
    if kind == "file":
        spec["path"] = t.string("path")
        p = Path(spec["path"])
        if not p.is_absolute() and base is not None:
            p = base / p
        spec["path"] = p
        spec["velocity"] = t.vector("velocity", (0.0, 0.0, 0.0))
        t.done()
        if shape != "sphere":
            raise t.err("shape", "file generators read spheres only")
        return spec
    if shape == "sphere":
        spec["size"] = np.array([t.number("radius", low=0.0, low_open=True)])
    elif shape == "box":
        he = t.vector("half_extents")
        if not (he > 0).all():
            raise t.err("half_extents", f"must be 3 numbers > 0, got {he.tolist()}")
        spec["size"] = he
    else:
        spec["size"] = np.array([t.number("radius", low=0.0, low_open=True),
                                 t.number("length", low=0.0, low_open=True)])
    spec["scale"] = _distribution(t, "scale")
    region = t.raw("region")
    if region is None:
        region = [sim.lo.tolist(), sim.hi.tolist()]
    if (not isinstance(region, list) or len(region) != 2
            or not all(isinstance(c, list) and len(c) == 3 for c in region)
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                       for c in region for x in c)):
        raise t.err("region", f"must be [[xlo, ylo, zlo], [xhi, yhi, zhi]] (numbers), got "
                              f"{region!r}")
    rlo, rhi = np.array(region[0], float), np.array(region[1], float)
    if not (np.isfinite(rlo).all() and np.isfinite(rhi).all()):
        raise t.err("region", f"must be finite, got {region!r}")
    if not (rhi > rlo).all():
        raise t.err("region", "upper corner must exceed the lower corner on every axis")
    inside = (rlo >= sim.lo - 1e-12).all() and (rhi <= sim.hi + 1e-12).all()
    if not inside:
        raise t.err("region", f"must lie inside the domain [{sim.lo.tolist()}, {sim.hi.tolist()}]")
    spec["region"] = (rlo, rhi)
    spec["velocity"] = t.vector("velocity", (0.0, 0.0, 0.0))
    spec["random_velocity"] = t.number("random_velocity", 0.0, low=0.0)
    spec["random_orientation"] = t.boolean("random_orientation", shape != "sphere")
    spec["fixed"] = t.boolean("fixed", False)
    if spec["fixed"] and (np.any(np.asarray(spec["velocity"]) != 0.0)
                          or spec["random_velocity"]):
        # (until 2026-11-28 the velocity was dropped without a word)
        raise t.err("fixed", "fixed bodies do not move, so velocity and random_velocity must "
                             "be zero (or absent) with fixed = true; remove one or the other")
    if kind == "lattice":
        spec["spacing"] = t.number("spacing", low=0.0, low_open=True)
        spec["jitter"] = t.number("jitter", 0.0, low=0.0)
    else:
        spec["count"] = t.number("count", low=1, integer=True)
        spec["placement"] = t.choice("placement", ("global", "local"), "global")
        # every rank makes all the bodies of a global placement, its share of a local one (a
        # count of 1e12 failed with numpy's MemoryError for an array of 7 TiB)
        each = spec["count"] // (sim.net.size if spec["placement"] == "local" else 1)
        need = _too_many(each)
        if need:
            raise t.err("count", f"{spec['count']:,} bodies ({each:,} on each rank with "
                                 f"placement = \"{spec['placement']}\") {need}; lower the count"
                                 + ("" if spec["placement"] == "local" else
                                    ", or place them rank-locally (placement = \"local\")"))
        spec["max_attempts"] = t.number("max_attempts",
                                        200 if spec["placement"] == "global" else 1000,
                                        low=1, integer=True)
        if kind == "rain":
            spec["every"] = t.number("every", low=1, integer=True)
            spec["total"] = t.number("total", low=1, integer=True)
    t.done()
    return spec


def _bounding(shape: str, size: np.ndarray) -> np.ndarray:
    """Bounding radius of bodies of per-body sizes (float[n, k])."""
    if shape == "sphere":
        return size[:, 0]
    if shape == "box":
        return np.linalg.norm(size, axis=1)
    return size[:, 0] + 0.5 * size[:, 1]


def _sizes(spec, rng, n):
    size = np.repeat(spec["size"][None, :], n, axis=0)
    if spec["scale"] is not None:
        size = size * spec["scale"](rng, n)[:, None]
    return size


def _place(sim, spec, t, centers, size, rng):
    n = centers.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.int64)
    v = spec["velocity"] + spec["random_velocity"] * rng.uniform(-1, 1, (n, 3))
    q = None
    if spec["random_orientation"]:
        q = rng.standard_normal((n, 4))
        q /= np.linalg.norm(q, axis=1)[:, None]
    shape, mat, fx = spec["shape"], spec["material"], spec["fixed"]
    if shape == "sphere":
        return _add(t, "shape", lambda: sim.add_spheres(centers, size[:, 0], mat, velocities=v,
                                                        fixed=fx))
    if shape == "box":
        return _add(t, "shape", lambda: sim.add_boxes(centers, size, mat, orientations=q,
                                                      velocities=v, fixed=fx))
    return _add(t, "shape", lambda: sim.add_capsules(centers, size[:, 0], size[:, 1], mat,
                                                     orientations=q, velocities=v, fixed=fx))


def _generate(sim: Simulation, spec: dict, t: _Table) -> str | None:
    kind = spec["kind"]
    if kind == "file":
        if sim.net.size > 1 and spec["path"].suffix != ".npz":
            _file_local(sim, spec, t)
            return
        pos, rad, vel, ang, _ = _read_bodies(spec["path"], t)
        _add(t, "path", lambda: sim.add_spheres(pos, rad, spec["material"],
                                                velocities=vel + spec["velocity"],
                                                angular_velocities=ang))
        return
    rlo, rhi = spec["region"]
    if kind == "lattice":
        return _lattice(sim, spec, t, rlo, rhi)
    _random_batch(sim, spec, t, spec["count"])


def _lattice_axis(c0, a, count, blo, bhi, jitter, lo, hi, periodic) -> np.ndarray:
    """Indices i of lattice coordinates c0 + (i + 1/2) a (0 <= i < count) that may land, after
    a jitter of at most ``jitter`` and a periodic wrap, in the block [blo, bhi) (a superset:
    the ownership test decides)."""
    reach = [(blo - jitter, bhi + jitter)]
    if periodic:
        length = hi - lo
        reach += [(blo - jitter - length, bhi + jitter - length),
                  (blo - jitter + length, bhi + jitter + length)]
    keep = []
    for x0, x1 in reach:
        f0 = np.clip((x0 - c0) / a - 0.5, -1.0, count + 1.0)
        f1 = np.clip((x1 - c0) / a - 0.5, -1.0, count + 1.0)
        # c0 + (i + 1/2) a in [x0, x1]  <=>  f0 <= i <= f1 (a millionth of a spacing slack)
        i0, i1 = max(0, math.ceil(f0 - 1e-6)), min(count, math.floor(f1 + 1e-6) + 1)
        if i1 > i0:
            keep.append(np.arange(i0, i1))
    return np.unique(np.concatenate(keep)) if keep else np.empty(0, dtype=np.int64)


#: a lower bound of the memory one body takes on its rank (storage, neighbour lists, broad
#: phase: about 1.5 kB measured, docs/benchmarks/scaling.md), for the generators' size checks
_BYTES_PER_BODY = 500


def _too_many(bodies: int) -> str | None:
    """Why ``bodies`` bodies on one rank would not fit in this machine's physical memory (at
    :data:`_BYTES_PER_BODY` each), or None (also when the memory is unknown)."""
    try:
        ram = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None
    if bodies * _BYTES_PER_BODY <= ram:
        return None
    return (f"would need more than {bodies * _BYTES_PER_BODY / 2**30:.3g} GiB per rank "
            f"({_BYTES_PER_BODY} bytes per body) of this machine's {ram / 2**30:.3g} GiB")


def _lattice(sim, spec, t, rlo, rhi) -> str | None:
    """A simple cubic lattice filling the region, made rank-locally: each rank computes only the
    lattice points that can end up in its block, with counter-based random numbers keyed by the
    point's index (sizes, jitter, velocities, orientations), and adds them with uids
    ``first uid + index``; so no rank holds the whole lattice and the bodies are the same bits
    on any number of ranks. Points whose body would overlap a body already there (bounding
    spheres, periodic images included) are left out, their uids unused. Returns a note saying
    how many were left out, or None."""
    a = spec["spacing"]
    per_axis = np.floor((rhi - rlo) / a + 1e-9)
    if (per_axis < 1).any():
        raise t.err("spacing", f"{a} is larger than the region {(rhi - rlo).tolist()}")
    # before anything is generated (a spacing far too small made each rank build index arrays
    # of 1e8 entries and then hang in them; 2026-11-29): too many points, or points that
    # certainly overlap (every body the same size), are refused at once, on every rank alike
    total = float(np.prod(per_axis))
    if total > MAX_UID:
        raise t.err("spacing", f"{a} fills the region {(rhi - rlo).tolist()} with {total:.3g} "
                               f"lattice points, more than parsim's uids ({MAX_UID:.3g}); use a "
                               "larger spacing or a smaller region")
    if spec["scale"] is None:
        rb0 = float(_bounding(spec["shape"], spec["size"][None, :])[0])
        if 2 * rb0 > a * (1 + 1e-12):
            raise t.err("spacing", f"{a} is smaller than the bodies' bounding diameter "
                                   f"{2 * rb0!r}: bodies would overlap")
    counts = per_axis.astype(np.int64)
    key = int(spec["rng"].integers(0, 2**62))
    dec = sim.dec
    axes = [_lattice_axis(rlo[d], a, int(counts[d]), dec.block_lo[d], dec.block_hi[d],
                          spec["jitter"], sim.lo[d], sim.hi[d], bool(sim.periodic[d]))
            for d in range(3)]
    mine = math.prod(ax.size for ax in axes)
    need = _too_many(mine)
    msg = (f"{a} puts {mine:,} lattice points on rank {sim.net.rank}, which {need}; use a "
           "larger spacing, a smaller region or more ranks") if need else None
    msg = sim.net.first_error(msg)
    if msg is not None:
        raise t.err("spacing", msg)
    g = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    index = (g[:, 0] * counts[1] + g[:, 1]) * counts[2] + g[:, 2]
    centers = rlo + (g + 0.5) * a
    size = np.repeat(spec["size"][None, :], index.size, axis=0)
    if spec["scale"] is not None:
        size = size * spec["scale"].hashed(key, index)[:, None]
    rb = _bounding(spec["shape"], size)
    msg = None
    if index.size and (2 * rb > a * (1 + 1e-12)).any():
        msg = (f"{a} is smaller than the largest body's bounding diameter "
               f"{float(2 * rb.max())!r}: "
               "bodies would overlap")
    msg = sim.net.first_error(msg)
    if msg is not None:
        raise t.err("spacing", msg)
    if spec["jitter"]:
        u = np.stack([randoms.uniform(key, index, 0, _S_JITTER + k) for k in range(3)], 1)
        centers = centers + spec["jitter"] * (2.0 * u - 1.0)
        # a centre jittered out of the domain on a walled axis: the jitter's fault (it was
        # reported as "[[bodies]][k].shape: sphere 0 ... lies outside the domain" until
        # 2026-11-28)
        out = sim.walled & ((centers < sim.lo) | (centers >= sim.hi))
        msg = None
        if out.any():
            i = int(np.flatnonzero(out.any(axis=1))[0])
            msg = (f"= {spec['jitter']!r} moves lattice point {int(index[i])} to "
                   f"{centers[i].tolist()}, outside the domain on a non-periodic axis; use a "
                   "jitter below the distance of the region's outer points to the domain "
                   f"bounds (half the spacing is {0.5 * a!r})")
        msg = sim.net.first_error(msg)
        if msg is not None:
            raise t.err("jitter", msg)
    clear = _clear_of_bodies(sim, centers, rb)
    index, centers, size, rb = index[clear], centers[clear], size[clear], rb[clear]
    # (until 2026-11-28 a lattice with bodies too large for the blocks ran on one rank and
    # stopped with an error on several)
    index, centers, size = _share_global(sim, index, centers, size, rb)
    before = sim.count_bodies()
    first = sim.next_uid
    _add_generated(sim, spec, t, key, first + index, index, centers, size, shared_global=True)
    sim._next_uid = first + int(np.prod(counts))      # the lattice's whole uid range
    left_out = int(np.prod(counts)) - (sim.count_bodies() - before)
    if left_out:
        return (f"{spec['where']} (lattice): {left_out} of {int(np.prod(counts))} points left "
                "out, where their bodies would overlap bodies already there")
    return None


def _clear_of_bodies(sim, centers, rb) -> np.ndarray:
    """Collective: for each ball (``centers``, bounding radii ``rb``), whether it overlaps no
    finite body already in ``sim`` (bounding spheres; touching is allowed), periodic images
    included. The answer for a ball does not depend on the rank that asks, so a lattice point
    computed by several ranks is kept or left out by all of them."""
    from .broadphase import HierarchicalHashGrid

    n = centers.shape[0]
    big = sim.largest_radius()                        # collective; 0: no finite body yet
    if big == 0.0:
        return np.ones(n, dtype=np.bool_)
    margin = big + (float(rb.max()) if n else 0.0)
    lo = centers.min(axis=0) - margin if n else np.full(3, np.inf)
    hi = centers.max(axis=0) + margin if n else np.full(3, -np.inf)
    # the bodies whose centre, or one of its periodic images, lies in [lo, hi]: one query per
    # image shift (the same shifts on every rank, so the collectives line up; a rank whose box
    # does not cross the domain's bounds asks for nothing in the shifted boxes)
    per = np.asarray(sim.periodic, dtype=np.bool_)
    dlo, dhi = np.asarray(sim.lo, dtype=np.float64), np.asarray(sim.hi, dtype=np.float64)
    length = np.where(per, dhi - dlo, 0.0)
    steps = [(-1, 0, 1) if per[d] else (0,) for d in range(3)]
    found_pos, found_r = [], []
    for k in np.stack(np.meshgrid(*steps, indexing="ij"), -1).reshape(-1, 3):
        shift = k * length
        qlo, qhi = lo - shift, hi - shift
        if k.any() and not (n and ((k < 0) & (lo < dlo) | (k > 0) & (hi > dhi))[k != 0].all()):
            qlo, qhi = np.full(3, np.inf), np.full(3, -np.inf)      # no image can reach
        p, q = packing.obstacles(sim, qlo, qhi)
        found_pos.append(p + shift)
        found_r.append(q)
    pos, r = np.concatenate(found_pos), np.concatenate(found_r)
    clear = np.ones(n, dtype=np.bool_)
    if n == 0 or r.size == 0:
        return clear
    bp = HierarchicalHashGrid()
    pts = np.concatenate([centers, pos])
    rad = np.concatenate([rb, r])[:, None]
    bp.add(np.arange(pts.shape[0], dtype=np.int64), pts - rad, pts + rad)
    pairs = bp.pairs()
    a, b = pairs.min(axis=1), pairs.max(axis=1)
    cross = (a < n) & (b >= n)                        # a lattice point and a body
    a, b = a[cross], b[cross]
    gap = np.sqrt(((pts[a] - pts[b]) ** 2).sum(axis=1)) - (rad[a, 0] + rad[b, 0])
    clear[a[gap < 0.0]] = False
    return clear


def _random_batch(sim, spec, t, count) -> int:
    """Place ``count`` bodies of a ``random`` or ``rain`` generator; returns how many were
    placed. ``placement = "global"``: the serial random sequential addition, made whole on
    every rank; ``"local"``: computed rank-locally (``parsim/packing.py``)."""
    if spec["placement"] == "local":
        return _random_local(sim, spec, t, count)
    rng = spec["rng"]
    rlo, rhi = spec["region"]
    size = _sizes(spec, rng, count)
    rb = _bounding(spec["shape"], size)
    order = np.argsort(-rb, kind="stable")           # big bodies first pack best
    size, rb = size[order], rb[order]
    if (2 * rb >= (rhi - rlo).min()).any():
        raise t.err("region", f"is too small for bodies of bounding diameter {2 * rb.max():.4g}")
    margin = 2.0 * max(float(rb.max()), sim.largest_radius())
    _, obs_pos, obs_r = sim.bodies_near(rlo - margin, rhi + margin)
    seed = int(rng.integers(0, 2**31 - 1))
    centers = np.zeros((count, 3))
    give_up = spec["kind"] == "random"        # all bodies or an error: stop at the first miss
    placed = _rsa(rlo, rhi, rb, obs_pos, obs_r, seed, spec["max_attempts"], centers, give_up)
    if placed < count and give_up:
        raise t.err("count", f"only the first {placed} of {count} bodies fit in the region "
                             f"without overlap: the next found no room in {spec['max_attempts']} "
                             "attempts; enlarge the region or lower the count")
    _place(sim, spec, t, centers[:placed], size[:placed], rng)
    return placed


def _hashed_sizes(spec, key: int, ordinal: np.ndarray) -> np.ndarray:
    """Per-body sizes (float[n, k]) of a generator, drawn by body ordinal (counter-based)."""
    size = np.repeat(spec["size"][None, :], ordinal.size, axis=0)
    if spec["scale"] is not None:
        size = size * spec["scale"].hashed(key, ordinal)[:, None]
    return size


def _random_local(sim, spec, t, count) -> int:
    """``placement = "local"``: random sequential addition in cells, computed rank-locally
    (``parsim/packing.py``): each rank computes the cells near its block and adds the bodies
    whose centre it owns; bodies too large for the blocks are shared with every rank. The
    bodies are the same bits on any number of ranks. Collective; returns how many were placed
    (on every rank)."""
    rlo, rhi = spec["region"]
    key = int(spec["rng"].integers(0, 2**62))
    first = sim.next_uid
    r0 = float(_bounding(spec["shape"], spec["size"][None, :])[0])

    def sizes(ordinal):
        size = _hashed_sizes(spec, key, ordinal)
        return size, _bounding(spec["shape"], size)

    batch = packing.Batch(sim, rlo, rhi, count, key, r0, sizes, spec["max_attempts"])
    try:
        batch.place(sim.largest_radius())
    except packing.NoRoom as e:          # on every rank alike (the room is summed)
        if spec["kind"] == "rain":       # a full region takes none in this batch
            return 0
        raise t.err("region", str(e)) from None
    except packing.TooSmall as e:
        raise t.err("region", str(e)) from None
    if batch.placed < count and spec["kind"] == "random":
        raise t.err("count", f"only {batch.placed} of {count} bodies fit in the region without "
                             f"overlap after {spec['max_attempts']} attempts each; enlarge the "
                             "region, lower the count or raise max_attempts")
    ordinal, pos, size = _share_global(sim, batch.ordinal, batch.position, batch.size,
                                       batch.radius)
    _add_generated(sim, spec, t, key, first + ordinal, ordinal, pos, size, shared_global=True)
    sim._next_uid = first + batch.uid_span                 # the batch's whole uid range
    return batch.placed


_GENERATED = np.dtype([("ordinal", np.int64), ("position", np.float64, 3), ("size", np.float64, 3)])


def _share_global(sim, ordinal, pos, size, radius):
    """Collective, for the rank-local generators: the bodies too large for the blocks (bounding
    ``radius`` above ``sim.global_radius``) are global, so every rank must pass them. Returns
    (ordinal, pos, size) with those of every rank first (once each, by ordinal: several ranks
    may have computed one), then this rank's others. Serial: unchanged."""
    if sim.net.size == 1:
        return ordinal, pos, size
    big = radius > sim.global_radius
    rec = np.zeros(int(big.sum()), dtype=_GENERATED)
    rec["ordinal"], rec["position"] = ordinal[big], pos[big]
    rec["size"][:, : size.shape[1]] = size[big]
    shared = sim.net.allgather_records(rec, _GENERATED)
    shared = shared[np.unique(shared["ordinal"], return_index=True)[1]]
    return (np.concatenate([shared["ordinal"], ordinal[~big]]),
            np.concatenate([shared["position"].reshape(-1, 3), pos[~big]]),
            np.concatenate([shared["size"][:, : size.shape[1]], size[~big]]))


def _add_generated(sim, spec, t, key, uids, ordinal, centers, size,
                   shared_global: bool = False) -> None:
    """Rank-local add of generated bodies (the lattice and the local placement), their
    velocities and orientations drawn by ordinal; each body is passed by the ranks that may
    own it. ``shared_global``: bodies too large for the blocks are passed by every rank."""
    v = np.broadcast_to(spec["velocity"], centers.shape)
    if spec["random_velocity"]:
        u = np.stack([randoms.uniform(key, ordinal, 0, _S_VELOCITY + k) for k in range(3)], 1)
        v = v + spec["random_velocity"] * (2.0 * u - 1.0)
    shape = spec["shape"]
    q = None
    if spec["random_orientation"] and shape != "sphere":
        q = np.stack([randoms.normal(key, ordinal, _S_ORIENT + k) for k in range(4)], 1)
        q /= np.linalg.norm(q, axis=1)[:, None]
    params = np.zeros((centers.shape[0], 3))
    if shape == "sphere":
        code, params[:, 0] = SPHERE, size[:, 0]
    elif shape == "box":
        code, params[:] = BOX, size
    else:
        code, params[:, 0], params[:, 1] = CAPSULE, size[:, 0], 0.5 * size[:, 1]
    _add(t, "shape", lambda: sim._add(code, params, centers, q, v, None, spec["material"],
                                      spec["fixed"], uids, shared_global=shared_global))


def pour(sim: Simulation, rain: RainSchedule, t: _Table | None = None) -> int:
    """Insert the next batch of a ``rain`` generator (fewer if the region is crowded)."""
    if rain.remaining <= 0:
        return 0
    t = t or _Table({}, rain.spec["where"], "<rain>")
    k = _random_batch(sim, rain.spec, t, min(rain.count, rain.remaining))
    rain.remaining -= min(rain.count, rain.remaining)
    return k


@njit(cache=True)
def _rsa(lo, hi, radii, obs_pos, obs_r, seed, attempts, out, give_up=False):
    """Random sequential addition of balls of ``radii`` in the box [lo + r, hi - r], avoiding
    each other and the obstacles; a uniform grid of cell 2 r_max makes each test O(1).

    ``give_up``: stop at the first ball that finds no room in ``attempts`` tries, for a
    ``random`` generator, which then fails anyway. Going on took 13 s for 300,000 spheres in a
    region that jams at a few thousand (200 tries for each of the ~292,000 that found no room),
    and the count it reported (7,805 placed) was no count that works: asked for 7,805, the
    same generator placed 6,917 and failed. Up to the first miss every ball fit; a count that
    fits has no miss, so this changes no placement that succeeds."""
    np.random.seed(seed)
    n = radii.shape[0]
    rmax = radii.max()
    if obs_r.shape[0]:
        rmax = max(rmax, obs_r.max())
    cell = 2.0 * rmax
    dims = np.empty(3, dtype=np.int64)
    for d in range(3):
        # cells no smaller than 2 r_max, so that the 27 around a ball hold every ball it can
        # touch (with "+ 1" here they were smaller, and two balls two cells apart could be
        # placed overlapping: found by a fuzzer, 2026-11-28)
        dims[d] = max(1, min(256, int((hi[d] - lo[d]) / cell)))
    cell_of = np.empty(3)
    for d in range(3):
        cell_of[d] = (hi[d] - lo[d]) / dims[d]
    n_obs = obs_r.shape[0]
    total = n + n_obs
    px = np.empty((total, 3))
    pr = np.empty(total)
    head = np.full(dims[0] * dims[1] * dims[2], -1, dtype=np.int64)
    nxt = np.full(total, -1, dtype=np.int64)
    m = 0
    for j in range(n_obs):
        inside = True
        c = 0
        for d in range(3):
            x = obs_pos[j, d]
            if x < lo[d] - rmax * 2 or x > hi[d] + rmax * 2:
                inside = False
        if not inside:
            continue
        for d in range(3):
            px[m, d] = obs_pos[j, d]
        pr[m] = obs_r[j]
        c = _cell(px[m], lo, cell_of, dims)
        nxt[m] = head[c]
        head[c] = m
        m += 1
    placed = 0
    for i in range(n):
        r = radii[i]
        ok = False
        x = np.empty(3)
        for _a in range(attempts):
            for d in range(3):
                x[d] = lo[d] + r + np.random.random() * (hi[d] - lo[d] - 2 * r)
            ok = True
            ci = np.empty(3, dtype=np.int64)
            for d in range(3):
                ci[d] = min(dims[d] - 1, max(0, int((x[d] - lo[d]) / cell_of[d])))
            for dx in range(-1, 2):
                for dy in range(-1, 2):
                    for dz in range(-1, 2):
                        a0, a1, a2 = ci[0] + dx, ci[1] + dy, ci[2] + dz
                        if a0 < 0 or a1 < 0 or a2 < 0 or a0 >= dims[0] or a1 >= dims[1] or a2 >= dims[2]:
                            continue
                        k = head[(a0 * dims[1] + a1) * dims[2] + a2]
                        while k >= 0:
                            s = 0.0
                            for d in range(3):
                                s += (px[k, d] - x[d]) ** 2
                            if s < (pr[k] + r) ** 2:
                                ok = False
                                break
                            k = nxt[k]
                        if not ok:
                            break
                    if not ok:
                        break
                if not ok:
                    break
            if ok:
                break
        if not ok:
            if give_up:
                break
            continue
        for d in range(3):
            px[m, d] = x[d]
            out[placed, d] = x[d]
        pr[m] = r
        c = _cell(px[m], lo, cell_of, dims)
        nxt[m] = head[c]
        head[c] = m
        m += 1
        placed += 1
    return placed


@njit(cache=True)
def _cell(x, lo, cell_of, dims):
    c = np.empty(3, dtype=np.int64)
    for d in range(3):
        c[d] = min(dims[d] - 1, max(0, int((x[d] - lo[d]) / cell_of[d])))
    return (c[0] * dims[1] + c[1]) * dims[2] + c[2]


def _read_bodies(path: Path, t: _Table, part=None):
    """Spheres from an ``.npz`` or HDF5 file: datasets ``position`` (n, 3), ``radius`` or
    ``diameter`` (one value or n), optional ``velocity`` and ``angular_velocity`` (n, 3).
    Returns (position, radius, velocity, angular_velocity, first row). ``part = (k, parts)``:
    only rows ``k n // parts`` to ``(k + 1) n // parts``; an HDF5 file is read as that slice
    (an ``.npz`` archive cannot be: it is read whole and sliced)."""
    if not path.exists():
        raise t.err("path", f"file {str(path)!r} does not exist")
    if path.is_dir():
        raise t.err("path", f"{str(path)!r} is a directory; give the .npz or HDF5 file in it")
    try:
        if path.suffix == ".npz":
            try:
                with np.load(path, allow_pickle=False) as f:
                    return _file_rows({k: f[k] for k in f.files}, path, t, part)
            except (ValueError, OSError, EOFError) as e:
                if isinstance(e, ConfigError):
                    raise
                raise t.err("path", f"{str(path)!r} is not a numpy .npz archive of plain arrays "
                                    f"({type(e).__name__}); parsim reads the datasets position "
                                    "and radius from an .npz written by numpy.savez, or from "
                                    "HDF5, and never unpickles data files") from None
        import h5py
        with h5py.File(path, "r") as f:
            return _file_rows({k: f[k] for k in f.keys() if isinstance(f[k], h5py.Dataset)},
                              path, t, part)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - any reader failure becomes a config error
        raise t.err("path", f"cannot read {str(path)!r} as .npz or HDF5: {e}") from None


def _file_rows(data: dict, path: Path, t: _Table, part):
    """:func:`_read_bodies` on opened datasets (numpy arrays or h5py datasets: both slice)."""
    name = str(path)
    if "position" not in data:
        raise t.err("path", f"{name!r} has no 'position' dataset (found {sorted(data)})")
    P = data["position"]
    if len(P.shape) != 2 or P.shape[1] != 3:
        raise t.err("path", f"{name!r}: 'position' must have shape (n, 3), got {P.shape}")
    n = P.shape[0]
    key = "radius" if "radius" in data else ("diameter" if "diameter" in data else None)
    if key is None:
        raise t.err("path", f"{name!r} has neither 'radius' nor 'diameter'")
    R = data[key]
    if R.shape not in ((), (1,), (n,)):
        raise t.err("path", f"{name!r}: '{key}' must be one number or one per position "
                            f"({n}), got shape {R.shape}")
    for opt in ("velocity", "angular_velocity"):
        if opt in data and data[opt].shape != (n, 3):
            raise t.err("path", f"{name!r}: '{opt}' must have shape ({n}, 3) like 'position', "
                                f"got {data[opt].shape}")
    a, b = (0, n) if part is None else (part[0] * n // part[1], (part[0] + 1) * n // part[1])
    pos = np.asarray(P[a:b], float)
    rad = np.asarray(R[()] if R.shape != (n,) else R[a:b], float)
    if key == "diameter":
        rad = 0.5 * rad
    rad = np.broadcast_to(rad.reshape(-1) if rad.ndim else rad, (b - a,)).copy()
    vel = np.asarray(data["velocity"][a:b], float) if "velocity" in data else np.zeros((b - a, 3))
    ang = (np.asarray(data["angular_velocity"][a:b], float) if "angular_velocity" in data
           else np.zeros((b - a, 3)))
    return pos, rad, vel, ang, a


#: one sphere of a file on its way from the rank that read it to the rank that owns it
FILE_ROW = np.dtype([("uid", "<i8"), ("position", "<f8", (3,)), ("radius", "<f8"),
                     ("velocity", "<f8", (3,)), ("angular_velocity", "<f8", (3,))])


def _file_local(sim: Simulation, spec: dict, t: _Table) -> None:
    """The file generator on several ranks, without any rank holding every body: rank k reads
    the k-th of P equal slices of the rows (an HDF5 hyperslab), checks them (errors name the
    file row, and every rank raises the first one), and sends each sphere to the rank whose
    block holds its centre (one all-to-all); spheres larger than the blocks allow (global
    bodies) go to every rank. Uids are ``next_uid + row``, as in the serial generator, so the
    bodies are the serial ones bit for bit."""
    net, path = sim.net, spec["path"]
    first = sim.next_uid
    try:
        pos, rad, vel, ang, a = _read_bodies(path, t, part=(net.rank, net.size))
        bad = ~(np.isfinite(rad) & (rad > 0))
        bad_pos = ~np.isfinite(pos).all(axis=1) | (sim.walled & ((pos < sim.lo)
                                                                 | (pos >= sim.hi))).any(axis=1)
        bad_vel = ~(np.isfinite(vel).all(axis=1) & np.isfinite(ang).all(axis=1))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise t.err("path", f"{str(path)!r} row {a + i}: the radius must be finite and > 0, "
                                f"got {float(rad[i])!r}")
        if bad_pos.any():
            i = int(np.flatnonzero(bad_pos)[0])
            raise t.err("path", f"{str(path)!r} row {a + i}: position {pos[i].tolist()} is not "
                                f"finite or lies outside the domain [{sim.lo.tolist()}, "
                                f"{sim.hi.tolist()}) on a non-periodic axis")
        if bad_vel.any():
            i = int(np.flatnonzero(bad_vel)[0])
            raise t.err("path", f"{str(path)!r} row {a + i}: the velocity and angular velocity "
                                "must be finite")
        err = None
    except ConfigError as e:
        err = str(e)
    err = net.first_error(err)
    if err is not None:
        raise ConfigError(err)
    rec = np.empty(pos.shape[0], dtype=FILE_ROW)
    rec["uid"] = first + a + np.arange(pos.shape[0], dtype=np.int64)
    rec["position"] = pos
    rec["radius"] = rad
    rec["velocity"] = vel + spec["velocity"]
    rec["angular_velocity"] = ang
    big = rad > sim.global_radius            # a sphere's bounding radius is its radius
    shared = net.allgather_records(rec[big], FILE_ROW)
    rest = rec[~big]
    c = rest["position"]
    if sim.periodic.any():                   # the wrap of Simulation._add_bodies
        box = np.where(sim.periodic, sim.hi - sim.lo, 1.0)
        c = c - np.floor((c - sim.lo) / box) * sim.periodic * box
    owner = sim.dec.owner_rank(c)
    order = np.argsort(owner, kind="stable")
    mine = net.alltoall_records(rest[order], np.bincount(owner, minlength=net.size), FILE_ROW)
    mine = np.concatenate([shared, mine])
    params = np.zeros((mine.shape[0], 3))
    params[:, 0] = mine["radius"]
    _add(t, "path", lambda: sim._add(SPHERE, params, mine["position"], None, mine["velocity"],
                                     mine["angular_velocity"], spec["material"], False,
                                     mine["uid"], shared_global=True))
    # no uid is given when the file is empty: next_uid must still move past the rows
    sim._next_uid = max(sim._next_uid, first + int(net.isum(pos.shape[0])))