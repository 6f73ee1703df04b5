"""Reading parsim output: ``run = parsim.io.open_run(DIR)``; ``run.steps``; ``run.snapshot(step)``.

Errors name the file and what is wrong (missing, not HDF5, not a parsim file, newer format).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .output import FILE_FIELDS, FORMAT, FORMAT_VERSION


class OutputError(ValueError):
    """A file or directory is not readable parsim output."""


class Run:
    """The snapshots of one run directory."""

    def __init__(self, directory):
        import h5py

        self.dir = Path(directory)
        self.path = self.dir / "snapshots.h5" if self.dir.is_dir() else self.dir
        if not self.path.exists():
            raise OutputError(f"{self.path}: no such file (is {directory!r} a parsim output "
                              "directory? it should contain snapshots.h5)")
        try:
            self._f = h5py.File(self.path, "r")
        except OSError as e:
            raise OutputError(f"{self.path}: not a readable HDF5 file ({e})") from None
        fmt = self._f.attrs.get("format")
        if fmt != FORMAT:
            raise OutputError(f"{self.path}: not a parsim snapshot file (format attribute "
                              f"{fmt!r}, expected {FORMAT!r})")
        ver = int(self._f.attrs.get("format_version", -1))
        if ver > FORMAT_VERSION:
            raise OutputError(f"{self.path}: format version {ver} is newer than this parsim "
                              f"reads ({FORMAT_VERSION}); upgrade parsim")

    @property
    def steps(self) -> list[int]:
        return sorted(int(k) for k in self._f["snapshots"].keys())

    @property
    def checkpoints(self) -> list[Path]:
        """Checkpoint files of the run directory, oldest first."""
        from .checkpoint import checkpoints_in

        return checkpoints_in(self.dir) if self.dir.is_dir() else []

    @property
    def timings(self) -> dict:
        """Per-phase seconds (min / mean / max over ranks) stored at the end of the run."""
        g = self._f.get("timings")
        if g is None:
            return {}
        return {k: dict(zip(("min", "mean", "max"), g[k][()].tolist())) for k in g}

    @property
    def config(self) -> str:
        return self._f["config"].asstr()[()]

    @property
    def domain(self):
        """``(lo, hi, periodic)`` of the simulation (float arrays, -inf / inf on an unbounded
        axis; bool array), from the file's attributes; None for a file written before they
        were stored (then only a config text, if any, tells)."""
        a = self._f.attrs
        if not all(k in a for k in ("domain_lo", "domain_hi", "periodic")):
            return None
        return (np.asarray(a["domain_lo"], dtype=np.float64),
                np.asarray(a["domain_hi"], dtype=np.float64),
                np.asarray(a["periodic"]).astype(bool))

    @property
    def gravity(self):
        """The simulation's gravity when the file was created (float array), None for a file
        written before it was stored."""
        g = self._f.attrs.get("gravity")
        return None if g is None else np.asarray(g, dtype=np.float64)

    @property
    def densities(self):
        """``{material name: density}`` from the file, None for a file written without them
        (before they were stored, or by a writer given no simulation)."""
        g = self._f.get("materials")
        if g is None or "density" not in g.attrs:
            return None
        return dict(zip(g["names"].asstr()[()], np.asarray(g.attrs["density"], float).tolist()))

    def snapshot(self, step: int = -1) -> dict:
        steps = self.steps
        if not steps:
            raise OutputError(f"{self.path}: holds no snapshot")
        if step == -1:
            step = steps[-1]
        if step not in steps:
            raise OutputError(f"{self.path}: no snapshot at step {step} (steps: {steps[:5]}"
                              f"{' ...' if len(steps) > 5 else ''})")
        g = self._f["snapshots"][f"{step:010d}"]
        self._check_sources(g)
        out = {k: g[k][()] for k in FILE_FIELDS if k in g}
        order = np.argsort(out["uid"], kind="stable")
        out = {k: v[order] for k, v in out.items()}
        out.update({k: g.attrs[k] for k in ("step", "time", "status")})
        return out

    def _check_sources(self, g) -> None:
        """Every per-rank file behind the virtual datasets of a snapshot must be there and hold
        its piece: HDF5 silently returns fill values for a missing source."""
        for k in FILE_FIELDS:
            if k not in g or not g[k].is_virtual:
                continue
            for src in g[k].virtual_sources():
                path = self.path.parent / src.file_name
                if not path.exists():
                    raise OutputError(f"{self.path}: snapshot {g.name.split('/')[-1]} is "
                                      f"incomplete: its per-rank file {path} is missing")
                import h5py

                try:
                    with h5py.File(path, "r") as f:
                        ok = src.dset_name in f
                except OSError as e:
                    raise OutputError(f"{path}: unreadable per-rank file ({e})") from None
                if not ok:
                    raise OutputError(f"{path}: lacks {src.dset_name} (the run stopped while "
                                      "writing this snapshot?)")
            break                          # one field checks every source file

    def series(self, name: str) -> tuple[np.ndarray, list[np.ndarray]]:
        """(steps, [field at each step]) of one field (bodies sorted by uid in each)."""
        steps = self.steps
        return np.array(steps), [self.snapshot(s)[name] for s in steps]

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_run(directory) -> Run:
    return Run(directory)


def describe(path) -> str:
    """What a parsim file (snapshots, checkpoint) or run directory holds, as text
    (``parsim info``). Raises :class:`OutputError` / ``CheckpointError`` with the reason."""
    import h5py

    from . import checkpoint

    p = Path(path)
    if p.is_dir():
        lines = [describe(p / "snapshots.h5")] if (p / "snapshots.h5").exists() else []
        cks = checkpoint.checkpoints_in(p)
        lines.append(f"checkpoints: {len(cks)}" + "".join(f"\n  {c.name}{_damage(c)}"
                                                          for c in cks))
        if (p / "status").exists():
            lines.append(f"status: {(p / 'status').read_text().strip()}")
        return "\n".join(lines)
    if not p.exists():
        raise OutputError(f"{p}: no such file or directory")
    try:
        with h5py.File(p, "r") as f:
            fmt = f.attrs.get("format")
    except OSError as e:
        raise OutputError(f"{p}: not a readable HDF5 file ({e})") from None
    if fmt == checkpoint.FORMAT:
        d = checkpoint.read(p, bodies=False)
        checkpoint.check_parts(d)          # a missing or truncated part is an error here too
        shapes = d["shape_counts"]
        springs = f"{int(d['part_history'].sum())}" + (" (a contact across ranks counts on both)"
                                                      if int(d["ranks"]) > 1 else "")
        return "\n".join([
            f"{p}: parsim checkpoint, format version {checkpoint.FORMAT_VERSION} "
            f"({int(d['ranks'])} part file(s) in {checkpoint.parts_dir(p).name}/)",
            f"step {int(d['step'])}, time {float(d['time']):.6g} s, written on {int(d['ranks'])} "
            f"rank(s) as blocks {list(d['blocks'])}"
            + (f"; its run: to step {d['target_steps']}, a checkpoint every "
               f"{d['checkpoint_every']} steps (a restart's defaults)"
               if d["target_steps"] is not None else ""),
            f"bodies: {int(shapes.sum())} (spheres {shapes[0]}, boxes {shapes[1]}, capsules "
            f"{shapes[2]}, planes {shapes[3]}); touching contacts with springs: {springs}",
            f"materials: {', '.join(d['material_names'])}",
            f"config ({d['config_path'] or 'scripted'}):\n" + _indent(d["config"])])
    with Run(p) as run:
        steps = run.steps
        for s in steps:                    # every per-rank file behind every snapshot
            run._check_sources(run._f["snapshots"][f"{s:010d}"])
        lines = [f"{p}: parsim snapshots, format version "
                 f"{int(run._f.attrs['format_version'])}, parsim {run._f.attrs.get('parsim_version')}",
                 f"snapshots: {len(steps)} at steps {_steps_text(steps)}"]
        if steps:
            g = run._f["snapshots"][f"{steps[-1]:010d}"]
            lines.append(f"last: step {steps[-1]}, time {float(g.attrs['time']):.6g} s, "
                         f"{int(g.attrs['n_bodies'])} bodies, {int(g.attrs['n_contacts'])} "
                         f"contacts, status {g.attrs['status']}")
            ranks = int(g.attrs.get("ranks", 1))
            if ranks > 1:
                how = ("one shared file (collective writes)" if not g["uid"].is_virtual else
                       "one file per rank joined by virtual datasets")
                lines.append(f"written by {ranks} ranks: {how}")
        dom, grav, dens = run.domain, run.gravity, run.densities
        if dom is not None:
            lo, hi, per = dom
            lines.append(f"domain: {_vec(lo)} to {_vec(hi)}, periodic "
                         f"{[bool(x) for x in per]}; gravity {_vec(grav)}")
        if dens is not None:
            lines.append("materials (density): " + ", ".join(f"{k} {v:g}"
                                                              for k, v in dens.items()))
        t = run.timings
        if t:
            lines.append("timings [s] (min / mean / max over ranks): " + "; ".join(
                f"{k} {v['min']:.2f}/{v['mean']:.2f}/{v['max']:.2f}" for k, v in t.items()))
        lines.append("config:\n" + _indent(run.config))
    return "\n".join(lines)


def _damage(path) -> str:
    """'' for a checkpoint that :func:`parsim.checkpoint.read` and its parts accept, else why
    not (for the listing of a run directory)."""
    from . import checkpoint

    try:
        checkpoint.check_parts(checkpoint.read(path, bodies=False))
    except ValueError as e:
        return f"  (UNUSABLE: {e})"
    return ""


def _vec(v) -> str:
    return "unknown" if v is None else "(" + ", ".join(f"{float(x):g}" for x in v) + ")"


def _steps_text(steps) -> str:
    if len(steps) <= 8:
        return ", ".join(map(str, steps))
    return ", ".join(map(str, steps[:4])) + ", ..., " + ", ".join(map(str, steps[-3:]))


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.strip().splitlines())
