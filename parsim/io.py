"""Reading parsim output: ``run = parsim.io.open_run(DIR)``; ``run.steps``; ``run.snapshot(step)``.

Errors name the file and what is wrong (missing, not HDF5, not a parsim file, newer format).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .output import FIELDS, FORMAT, FORMAT_VERSION


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
    def config(self) -> str:
        return self._f["config"].asstr()[()]

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
        out = {k: g[k][()] for k in FIELDS if k in g}
        out.update({k: g.attrs[k] for k in ("step", "time", "status")})
        return out

    def series(self, name: str) -> tuple[np.ndarray, list[np.ndarray]]:
        """(steps, [field at each step]) of one field (bodies sorted by uid in each)."""
        steps = self.steps
        return np.array(steps), [self._f["snapshots"][f"{s:010d}"][name][()] for s in steps]

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_run(directory) -> Run:
    return Run(directory)
