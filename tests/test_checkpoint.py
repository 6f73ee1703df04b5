"""Checkpoints and restart: bit-identical continuation, atomic writes, signals, clear errors.

Runs in the serial session; the multi-rank cases launch ``mpiexec`` as a subprocess.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

import parsim
from parsim import checkpoint
from parsim.io import open_run
from parsim.runner import restart, run_config
from mpi_wait import quiet_barrier

REPO = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
STATE = ("uid", "position", "velocity", "orientation", "angular_velocity", "wraps")

CONFIG = """
[simulation]
dt = 1e-4
steps = {steps}
gravity = [0.0, 0.0, -9.81]
seed = 3
skin = 0.02

[domain]
lo = [0.0, 0.0, 0.0]
hi = [1.2, 0.6, 0.6]
periodic = [true, false, false]
walls = true

[output]
every = 200
checkpoint_every = {ck}
keep_checkpoints = {keep}
progress_every = 50

[[materials]]
name = "grain"
density = 2500.0
restitution = 0.6
collision_time = 1e-3
friction = 0.5
rolling_friction = 0.02

[[bodies]]
kind = "random"
shape = "sphere"
material = "grain"
radius = 0.03
scale = {{ distribution = "uniform", min = 0.7, max = 1.0 }}
region = [[0.05, 0.05, 0.05], [1.15, 0.55, 0.4]]
count = 250
velocity = [3.0, 0.0, 0.0]
random_velocity = 1.5

[[bodies]]
kind = "rain"
shape = "box"
material = "grain"
half_extents = [0.02, 0.03, 0.025]
region = [[0.05, 0.05, 0.42], [1.15, 0.55, 0.55]]
count = 30
every = 100
total = 150
velocity = [0.0, 0.0, -3.0]
random_velocity = 0.5

[[bodies]]
kind = "lattice"
shape = "capsule"
material = "grain"
radius = 0.015
length = 0.04
region = [[0.1, 0.1, 0.45], [1.1, 0.5, 0.58]]
spacing = 0.12
"""

QUIET = open(os.devnull, "w")


def write_config(tmp_path, steps=600, ck=150, keep=3) -> Path:
    p = tmp_path / "job.toml"
    p.write_text(CONFIG.format(steps=steps, ck=ck, keep=keep))
    return p


def same_state(a: dict, b: dict) -> list[str]:
    return [k for k in STATE if not np.array_equal(a[k], b[k])]


def _ck_step(path) -> int:
    return int(Path(path).stem.split("_")[1])


def drop_after(run_dir: Path, step: int) -> None:
    """Delete what a copied run directory holds after ``step`` (snapshots, checkpoints with
    their parts), so whatever is there after a restart from ``step`` is the restart's own."""
    for p in checkpoint.checkpoints_in(run_dir):
        if _ck_step(p) > step:
            p.unlink()
            shutil.rmtree(checkpoint.parts_dir(p))
    with h5py.File(run_dir / "snapshots.h5", "a") as f:
        for name in list(f["snapshots"]):
            if int(name) > step:
                del f["snapshots"][name]
    assert max(open_run(run_dir).steps) <= step
    assert all(_ck_step(p) <= step for p in checkpoint.checkpoints_in(run_dir))


def same_checkpoint(a, b) -> list[str]:
    """Fields of two checkpoints (bodies, springs, clock, pour generators) that differ in any
    bit."""
    x, y = checkpoint.read(a), checkpoint.read(b)
    bad = [k for k in ("step", "time", "next_uid", "deleted", "rains") if x[k] != y[k]]
    for group in ("bodies", "history", "common"):
        bad += [f"{group}/{f}" for f in x[group].dtype.names
                if x[group][f].tobytes() != y[group][f].tobytes()]
    return bad


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The uninterrupted 600-step run (checkpoints every 150 steps, the last 3 kept)."""
    d = tmp_path_factory.mktemp("full")
    cfg = write_config(d)
    assert run_config(str(cfg), str(d / "out"), stream=QUIET) == 0
    return d / "out"


def test_checkpoints_are_written_and_pruned(full_run):
    files = checkpoint.checkpoints_in(full_run)
    assert [p.name for p in files] == [f"checkpoint_{s:010d}.h5" for s in (300, 450, 600)]
    assert (full_run / "status").read_text().strip() == "done"
    data = checkpoint.read(files[0])
    assert data["step"] == 300 and data["ranks"] == 1 and data["blocks"] == (1, 1, 1)
    assert (np.diff(data["bodies"]["uid"]) > 0).all()
    assert data["history"].size > 0                  # touching contacts carry springs
    assert "[[bodies]]" in data["config"]
    assert list(data["rains"]) == [1]


@pytest.mark.parametrize("step", [300, 450])
def test_restart_is_bit_identical(full_run, tmp_path, step):
    """From step 300 (a pour happens right after) and 450 (none): the snapshots at 400 and 600
    and the later checkpoints equal the uninterrupted run's bit for bit. The copy of the run
    loses everything after ``step`` first, so they can only be the restart's."""
    run_dir = tmp_path / "run"
    shutil.copytree(full_run, run_dir)
    drop_after(run_dir, step)
    ck = run_dir / "checkpoints" / f"checkpoint_{step:010d}.h5"
    assert restart(str(ck), stream=QUIET) == 0
    a, b = open_run(full_run), open_run(run_dir)
    assert a.steps == b.steps == [0, 200, 400, 600]
    for s in (400, 600):
        if s > step:
            assert same_state(a.snapshot(s), b.snapshot(s)) == [], s
    assert [p.name for p in b.checkpoints] == [p.name for p in a.checkpoints]
    for p, q in zip(a.checkpoints, b.checkpoints):
        if _ck_step(p) > step:
            assert same_checkpoint(p, q) == [], p.name
    assert (run_dir / "status").read_text().strip() == "done"


@pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpiexec next to the interpreter")
def test_restart_on_other_rank_counts(full_run, tmp_path):
    """A serial checkpoint restarted on 2 ranks, and a 2-rank checkpoint restarted serially,
    end where the uninterrupted serial run ends, bit for bit."""
    from parsim import warmup

    warmup.compile_kernels()
    env = dict(os.environ, OMP_NUM_THREADS="1",
               NUMBA_CACHE_DIR=os.path.abspath(os.environ.get("NUMBA_CACHE_DIR",
                                                              REPO / ".numba_cache")))
    two = tmp_path / "two"
    shutil.copytree(full_run, two)
    drop_after(two, 300)              # every later snapshot below is written by a restart
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "mpi4py", "-m", "parsim",
                        "restart", str(two / "checkpoints" / "checkpoint_0000000300.h5"),
                        "--steps", "450", "--checkpoint-every", "150"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    ck450 = two / "checkpoints" / "checkpoint_0000000450.h5"
    data = checkpoint.read(ck450)
    assert data["ranks"] == 2 and data["blocks"] == (2, 1, 1)
    # one file per rank: each holds only its own bodies, none goes through rank 0
    parts = sorted(p.name for p in checkpoint.parts_dir(ck450).iterdir())
    assert parts == ["rank00000.h5", "rank00001.h5"]
    sizes = data["part_bodies"]
    assert sizes.min() > 0 and sizes.sum() + data["common"].size == data["bodies"].size
    # the same 2 ranks again (each reads only its own part) ...
    same = tmp_path / "same"
    shutil.copytree(two, same)
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "mpi4py", "-m", "parsim",
                        "restart", str(same / "checkpoints" / "checkpoint_0000000450.h5"),
                        "--steps", "600"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # ... three ranks (each reads the one or two old parts that overlap its block) ...
    three = tmp_path / "three"
    shutil.copytree(two, three)
    r = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, "-m", "mpi4py", "-m", "parsim",
                        "restart", str(three / "checkpoints" / "checkpoint_0000000450.h5"),
                        "--steps", "600"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # ... and one rank (reads both parts); --steps 600: the restarts' own default is 450, the
    # step count of the restart that wrote the checkpoint
    assert restart(str(ck450), steps=600, stream=QUIET) == 0
    a, b, c, d = open_run(full_run), open_run(two), open_run(same), open_run(three)
    assert same_state(a.snapshot(600), b.snapshot(600)) == []
    assert same_state(a.snapshot(600), c.snapshot(600)) == []
    assert same_state(a.snapshot(600), d.snapshot(600)) == []
    assert set(d.snapshot(600)["rank"].tolist()) == {0, 1, 2}
    # a missing part is an error naming it
    (checkpoint.parts_dir(ck450) / "rank00001.h5").unlink()
    with pytest.raises(checkpoint.CheckpointError, match="rank00001.h5 is missing"):
        checkpoint.read(ck450)


def test_failed_write_keeps_the_previous_checkpoint(full_run, tmp_path, monkeypatch):
    """An error in the middle of writing (standing in for a crash) leaves no file under the
    final name and the earlier checkpoints readable."""
    run_dir = tmp_path / "run"
    shutil.copytree(full_run, run_dir)
    from parsim.config import build
    import tomllib

    data = checkpoint.read(run_dir / "checkpoints" / "checkpoint_0000000450.h5")
    cfg = build(tomllib.loads(data["config"]), "x", data["config"], restart=True, comm=None)
    checkpoint.restore(cfg.sim, data, cfg.rains)
    real = h5py.Group.create_dataset

    def failing(self, name, *a, **k):
        if name == "velocity":
            raise OSError("disk full (simulated)")
        return real(self, name, *a, **k)

    monkeypatch.setattr(h5py.Group, "create_dataset", failing)
    target = run_dir / "checkpoints" / "checkpoint_0000000999.h5"
    with pytest.raises(OSError, match="disk full"):
        checkpoint.write(cfg.sim, target, data["config"])
    monkeypatch.undo()
    assert not target.exists()
    assert not target.with_name(target.name + ".tmp").exists()
    parts = checkpoint.parts_dir(target)
    assert not parts.exists() and not parts.with_name(parts.name + ".tmp").exists()
    for p in checkpoint.checkpoints_in(run_dir):
        checkpoint.read(p)


def _spawn_run(cfg, out, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               NUMBA_CACHE_DIR=os.path.abspath(os.environ.get("NUMBA_CACHE_DIR",
                                                              REPO / ".numba_cache")))
    return subprocess.Popen([sys.executable, "-m", "parsim", "run", str(cfg), "--output",
                             str(out), "--steps", str(steps)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(pred, timeout=240):
    t0 = time.time()
    while not pred():
        if time.time() - t0 > timeout:
            raise TimeoutError
        time.sleep(0.05)


def test_kill_9_during_checkpoints_leaves_complete_files(tmp_path):
    """A run writing a checkpoint every step is killed with SIGKILL: every checkpoint file
    under its final name is complete, and the newest restarts."""
    cfg = write_config(tmp_path, steps=100000, ck=1, keep=4)
    out = tmp_path / "out"
    proc = _spawn_run(cfg, out, 100000)
    try:
        _wait_for(lambda: len(checkpoint.checkpoints_in(out)) >= 3 or proc.poll() is not None)
        time.sleep(0.3)
    finally:
        proc.kill()
        proc.wait()
    files = checkpoint.checkpoints_in(out)
    assert len(files) >= 3, proc.stderr.read()
    for p in files:
        checkpoint.read(p)
    newest = files[-1]
    step = checkpoint.read(newest)["step"]
    assert restart(str(newest), steps=step + 20, checkpoint_every=0, stream=QUIET) == 0
    assert open_run(out).steps[-1] == step + 20                # the restart's final snapshot
    assert (out / "status").read_text().strip() == "done"


def test_sigterm_stops_with_a_checkpoint_and_restarts_exactly(full_run, tmp_path):
    """SIGTERM during a run: it finishes the step, writes a checkpoint and DIR/status
    "interrupted <step>", exits 0; the restart reaches step 600 with the uninterrupted bits."""
    cfg = write_config(tmp_path, ck=0)
    out = tmp_path / "out"
    proc = _spawn_run(cfg, out, 600)
    for line in proc.stdout:             # the first progress line: step 50 is done
        if line.startswith("step"):
            break
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    status = (out / "status").read_text().split()
    if status[0] == "done":            # the run was faster than the signal: nothing to test
        pytest.fail("the run ended before SIGTERM arrived; make it longer")
    assert status[0] == "interrupted", status
    step = int(status[1])
    files = checkpoint.checkpoints_in(out)
    assert files and checkpoint.read(files[-1])["step"] == step
    assert restart(str(files[-1]), stream=QUIET) == 0
    assert (out / "status").read_text().strip() == "done"
    assert same_state(open_run(full_run).snapshot(600), open_run(out).snapshot(600)) == []


def test_a_restart_from_an_earlier_checkpoint_drops_the_later_ones(full_run, tmp_path):
    """Restarting the run from step 300 to step 400 in its own directory replaces what came
    after 300: the snapshots (400, 600) and the checkpoints (450, 600) of the old future. Until
    2026-11-24 those checkpoints stayed, and the pruning (newest 3 kept) deleted the one the
    restart came from: [400, 450, 600], with snapshots ending at 400."""
    run_dir = tmp_path / "run"
    shutil.copytree(full_run, run_dir)
    ck = run_dir / "checkpoints" / "checkpoint_0000000300.h5"
    assert restart(str(ck), steps=400, stream=QUIET) == 0
    assert open_run(run_dir).steps == [0, 200, 400]
    assert [_ck_step(p) for p in checkpoint.checkpoints_in(run_dir)] == [300, 400]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "checkpoint_0000000300.h5", "checkpoint_0000000300.parts",
        "checkpoint_0000000400.h5", "checkpoint_0000000400.parts"]


def test_a_moved_checkpoint_does_not_restart_into_another_run(full_run, tmp_path, capsys):
    """A checkpoint copied out of its run (with its parts, as the docs allow) has no run
    directory: a restart without --output is refused, and so is one into a run directory of
    another config; nothing there changes. Until 2026-11-24 the directory two levels above the
    checkpoint was taken as the run's, and another run's snapshots there were replaced."""
    other = tmp_path / "other"
    cfg = write_config(tmp_path, steps=40, ck=20)          # another config (its step count)
    assert run_config(str(cfg), str(other), stream=QUIET) == 0
    src = checkpoint.checkpoints_in(full_run)[0]

    def digest():
        return sorted((p.relative_to(other).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
                      for p in other.rglob("*") if p.is_file())

    for where in (other / "saved", other / "checkpoints"):
        where.mkdir(exist_ok=True)
        shutil.copy(src, where / src.name)
        shutil.copytree(checkpoint.parts_dir(src), where / checkpoint.parts_dir(src).name)
        before = digest()
        capsys.readouterr()
        assert restart(str(where / src.name), stream=QUIET) == 2
        err = capsys.readouterr().err
        assert "pass --output DIR" in err and "Nothing was changed" in err, err
        assert ("not in a run's checkpoints/ directory" in err if where.name == "saved"
                else "holds another run" in err), err
        assert open_run(other).steps == [0, 40] and digest() == before
    # with --output a new directory it continues there
    assert restart(str(other / "saved" / src.name), str(tmp_path / "new"), stream=QUIET) == 0
    assert same_state(open_run(full_run).snapshot(600),
                      open_run(tmp_path / "new").snapshot(600)) == []


def _signal_at(needle: str, sig):
    """A run's output stream that sends ``sig`` to this process at the line holding ``needle``
    (a signal at a known step, without timing a subprocess)."""
    class Trigger:
        def write(self, text):
            if needle in text:
                os.kill(os.getpid(), sig)

        def flush(self):
            pass

    return Trigger


def test_ctrl_c_stops_with_a_checkpoint(tmp_path):
    """SIGINT (Ctrl-C on a workstation) stops the run as SIGTERM does: a checkpoint and
    "interrupted <step>" (until 2026-11-24 it ended the run with a traceback, no checkpoint and
    no status); the handler is the caller's again afterwards."""
    Trigger = _signal_at("step       100/600", signal.SIGINT)
    before = signal.getsignal(signal.SIGINT)
    cfg = write_config(tmp_path, ck=0)
    out = tmp_path / "out"
    assert run_config(str(cfg), str(out), stream=Trigger()) == 0
    status = (out / "status").read_text().split()
    assert status[0] == "interrupted" and 100 < int(status[1]) <= 150, status
    assert [_ck_step(p) for p in checkpoint.checkpoints_in(out)] == [int(status[1])]
    assert signal.getsignal(signal.SIGINT) is before


SIGNAL_AT_START = """
import os, signal, sys
from parsim.runner import run_config

class Trigger:                  # SIGTERM while the run is starting: at its header line
    def write(self, text):
        if text.startswith("parsim run"):
            os.kill(os.getpid(), signal.SIGTERM)
        sys.stdout.write(text)

    def flush(self):
        pass

sys.exit(run_config(sys.argv[1], sys.argv[2], stream=Trigger()))
"""


def test_sigterm_during_the_start_is_served_with_a_checkpoint(full_run, tmp_path):
    """SIGTERM before the first step (a long setup, a job preempted early): the run goes on to
    its first signal check, writes a checkpoint and stops as "interrupted <step>"; the restart
    reaches step 600 with the uninterrupted bits. Until 2026-11-24 the signal handlers were
    installed only when stepping began, and such a signal killed the run without a checkpoint."""
    cfg = write_config(tmp_path, ck=0)
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1",
               NUMBA_CACHE_DIR=os.path.abspath(os.environ.get("NUMBA_CACHE_DIR",
                                                              REPO / ".numba_cache")))
    proc = subprocess.run([sys.executable, "-c", SIGNAL_AT_START, str(cfg), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    status = (out / "status").read_text().split()
    assert status[0] == "interrupted" and 0 < int(status[1]) <= 50, status
    files = checkpoint.checkpoints_in(out)
    assert [_ck_step(p) for p in files] == [int(status[1])]
    assert restart(str(files[-1]), stream=QUIET) == 0
    assert (out / "status").read_text().strip() == "done"
    assert same_state(open_run(full_run).snapshot(600), open_run(out).snapshot(600)) == []


def test_bad_checkpoint_files_get_clear_errors(full_run, tmp_path, capsys):
    good = checkpoint.checkpoints_in(full_run)[-1]
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(checkpoint.CheckpointError, match="truncated.h5: not a readable HDF5"):
        checkpoint.read(truncated)
    with pytest.raises(checkpoint.CheckpointError, match="not a parsim checkpoint"):
        checkpoint.read(full_run / "snapshots.h5")
    text = tmp_path / "notes.h5"
    text.write_text("hello")
    with pytest.raises(checkpoint.CheckpointError, match="not a readable HDF5"):
        checkpoint.read(text)
    with pytest.raises(checkpoint.CheckpointError, match="no such checkpoint"):
        checkpoint.read(tmp_path / "missing.h5")
    newer = tmp_path / "newer.h5"
    shutil.copy(good, newer)
    with h5py.File(newer, "a") as f:
        f.attrs["format_version"] = 99
    with pytest.raises(checkpoint.CheckpointError, match="format version 99"):
        checkpoint.read(newer)
    # the command line reports it in one line, exit status 2
    assert restart(str(truncated), stream=QUIET) == 2
    assert "truncated.h5" in capsys.readouterr().err


def test_reader_and_info(full_run, capsys):
    """`open_run(DIR).checkpoints`, the stored per-phase timings, and `parsim info` on a run
    directory, a snapshot file, a checkpoint and a file that is none of them."""
    from parsim.cli import main

    run = open_run(full_run)
    assert [p.name for p in run.checkpoints] == [f"checkpoint_{s:010d}.h5" for s in (300, 450, 600)]
    t = run.timings
    assert {"contacts", "neighbours", "integration", "output"} <= set(t)
    assert all(v["min"] <= v["mean"] <= v["max"] for v in t.values())
    assert t["contacts"]["max"] > 0
    snap = run.snapshot(-1)
    assert snap["step"] == 600 and (np.diff(snap["uid"]) > 0).all()
    assert main(["info", str(full_run)]) == 0
    out = capsys.readouterr().out
    assert "snapshots: 4 at steps 0, 200, 400, 600" in out and "status: done" in out
    assert main(["info", str(run.checkpoints[0])]) == 0
    out = capsys.readouterr().out
    assert "parsim checkpoint, format version 2 (1 part file(s)" in out and "step 300" in out
    assert main(["info", str(full_run / "status")]) == 2
    assert "not a readable HDF5 file" in capsys.readouterr().err



SHRINKING = """
[simulation]
dt = 1e-4
steps = 400
seed = 5
outflow = "delete"

[domain]
lo = [0.0, 0.0, 0.0]
hi = [1.0, 1.0, 1.0]
periodic = [false, true, false]
walls = false

[output]
every = 50
checkpoint_every = 100
keep_checkpoints = 100

[[materials]]
name = "grain"
density = 2500.0
restitution = 0.6
collision_time = 1e-3
friction = 0.5

[[bodies]]
kind = "lattice"
shape = "sphere"
radius = 0.05
region = [[0.2, 0.0, 0.2], [0.8, 1.0, 0.8]]
spacing = 0.2
velocity = [0.0, 3.0, 0.0]
random_velocity = 0.5

[[bodies]]
kind = "random"
shape = "sphere"
radius = 0.01
region = [[0.9, 0.4, 0.4], [0.99, 0.6, 0.6]]
count = 1
velocity = [5.0, 0.0, 0.0]
"""


def test_restart_keeps_the_default_skin_after_the_smallest_body_left(tmp_path):
    """The default skin is 0.2 x the smallest radius at a setup. A small sphere leaves through
    the open x face (outflow "delete") before the checkpoint at step 100: the run keeps the
    skin of its setup (0.002), and the restart must too (it took 0.01 from the bodies left,
    and the snapshots from step 300 on differed; found by a restart fuzzer)."""
    cfg = tmp_path / "job.toml"
    cfg.write_text(SHRINKING)
    full = tmp_path / "full"
    assert run_config(str(cfg), str(full), stream=QUIET) == 0
    again = tmp_path / "again"
    shutil.copytree(full, again)
    drop_after(again, 100)
    assert restart(str(again / "checkpoints" / "checkpoint_0000000100.h5"), stream=QUIET) == 0
    a, b = open_run(full), open_run(again)
    assert a.steps == b.steps and max(a.steps) == 400
    for step in a.steps:
        x, y = a.snapshot(step), b.snapshot(step)
        assert x["uid"].size == (46 if step < 100 else 45)    # the small sphere left
        for k in ("uid", "position", "velocity", "angular_velocity", "wraps"):
            assert np.array_equal(x[k], y[k]), (step, k)
    assert checkpoint.read(full / "checkpoints" / "checkpoint_0000000100.h5")["skin"] == 0.002



LAST_STRETCH = """
[simulation]
dt = 1e-4
steps = 130
seed = 5
skin = 0.002

[domain]
lo = [0.0, 0.0, 0.0]
hi = [1.0, 1.0, 1.0]
periodic = [false, true, false]
walls = true

[output]
every = 1000
progress_every = 100
checkpoint_every = 100

[[materials]]
name = "grain"
density = 2500.0
restitution = 0.6
collision_time = 1e-3

[[bodies]]
kind = "lattice"
shape = "sphere"
radius = 0.05
region = [[0.2, 0.0, 0.2], [0.8, 1.0, 0.8]]
spacing = 0.2
velocity = [0.0, 3.0, 0.0]
"""


def test_signal_during_the_last_steps_ends_the_run_as_done(tmp_path):
    """SIGTERM at the progress line of step 100 of a 130-step run: the next stretch reaches the
    target, so the run is complete: status "done" with its timings, not "interrupted 130" (which
    told a job script to restart, and the restart was refused: nothing left to run)."""
    Trigger = _signal_at("step       100/130", signal.SIGTERM)
    cfg = tmp_path / "job.toml"
    cfg.write_text(LAST_STRETCH)
    out = tmp_path / "out"
    assert run_config(str(cfg), str(out), stream=Trigger()) == 0
    assert (out / "status").read_text().strip() == "done"
    run = open_run(out)
    assert run.steps == [0, 130] and run.timings is not None


def test_a_restart_continues_the_run_with_its_own_steps_and_checkpoint_interval(tmp_path,
                                                                                capsys):
    """`parsim run --steps 300 --checkpoint-every 100` of a config that says 600 steps and a
    checkpoint every 150: a restart without options goes on to step 300 with a checkpoint every
    100 steps, as the interrupted run would have (until 2026-11-24 it ran to the config's 600
    steps with the config's interval: a job resubmitted with a bare `parsim restart` ran past
    the end it was given)."""
    cfg = write_config(tmp_path)                  # steps = 600, checkpoint_every = 150
    ref = tmp_path / "ref"
    assert run_config(str(cfg), str(ref), steps=300, checkpoint_every=100, stream=QUIET) == 0
    files = checkpoint.checkpoints_in(ref)
    assert [_ck_step(p) for p in files] == [100, 200, 300]
    data = checkpoint.read(files[0], bodies=False)
    assert (data["target_steps"], data["checkpoint_every"]) == (300, 100)
    from parsim.cli import main
    capsys.readouterr()
    assert main(["info", str(files[0])]) == 0
    assert "its run: to step 300, a checkpoint every 100 steps" in capsys.readouterr().out
    run_dir = tmp_path / "run"
    shutil.copytree(ref, run_dir)
    drop_after(run_dir, 100)
    assert restart(str(run_dir / "checkpoints" / files[0].name), stream=QUIET) == 0
    assert open_run(run_dir).steps == [0, 200, 300]
    assert [_ck_step(p) for p in checkpoint.checkpoints_in(run_dir)] == [100, 200, 300]
    for p, q in zip(checkpoint.checkpoints_in(ref)[1:], checkpoint.checkpoints_in(run_dir)[1:]):
        assert same_checkpoint(p, q) == [], p.name
    assert (run_dir / "status").read_text().strip() == "done"
    # the finished run's last checkpoint: nothing left to run by default; --steps extends it
    last = checkpoint.checkpoints_in(run_dir)[-1]
    capsys.readouterr()
    assert restart(str(last), stream=QUIET) == 2
    assert "the step count of its run = 300 leaves nothing to run" in capsys.readouterr().err
    assert restart(str(last), steps=350, stream=QUIET) == 0
    assert open_run(run_dir).steps[-1] == 350
    assert [_ck_step(p) for p in checkpoint.checkpoints_in(run_dir)][-1] == 350


def _drift_scene(comm, bodies=True):
    """A floor under [0, 2] x [0, 1] x [0, 1] and a large skin (rare rebuilds): a sphere (uid
    1) starting at x = 0.98 moving +x crosses x = 1, the cut of 2 blocks along x, without a
    rebuild; a sphere of radius 0.15 is an ordinary body on 2 blocks [2, 1, 1] (global radius
    0.25) and a global one on [2, 2, 1] (0.125); small spheres on the floor around it.
    ``bodies=False``: the materials only (for a restore)."""
    sim = parsim.Simulation(dt=1e-4, domain=([0, 0, 0], [2, 1, 1]), skin=0.2, comm=comm,
                            gravity=(0, 0, -9.81))
    m = sim.add_material("grain", 2500.0, restitution=0.6, collision_time=1e-3, friction=0.4)
    if bodies:
        sim.add_plane((0, 0, 0), (0, 0, 1), m)
        sim.add_sphere((0.98, 0.5, 0.5), 0.05, m, velocity=(1.0, 0.0, 0.0))
        sim.add_sphere((0.5, 0.5, 0.3), 0.15, m)
        g = np.stack(np.meshgrid(np.linspace(0.2, 1.8, 9), [0.2, 0.8], [0.04]), -1)
        sim.add_spheres(g.reshape(-1, 3), 0.04, m)
    return sim


@pytest.mark.mpi(min_size=4)
def test_restart_on_more_ranks_keeps_drifted_and_newly_global_bodies(comm, tmp_path_factory):
    """A checkpoint of 2 ranks restored on all ranks (4: [2, 2, 1], 8: [2, 2, 2]; the cut x = 1
    is kept): the sphere
    that drifted past the cut since the last rebuild (still in the part of the rank left of it)
    and the sphere that is global on 4 ranks reach their owners; the restored state equals the
    written one and the continuation equals the 2-rank run bit for bit. The parts used to be
    chosen by block overlap: the drifted body was lost, and the newly global one reached only
    the ranks reading its part (a hang)."""
    from mpi4py import MPI

    from parsim import checkpoint

    base = comm.bcast(str(tmp_path_factory.mktemp("drift")) if comm.rank == 0 else None, root=0)
    path = Path(base) / "checkpoint_0000000300.h5"
    sub = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    before = after2 = None
    if comm.rank < 2:
        two = _drift_scene(sub)
        assert tuple(two.dec.dims) == (2, 1, 1)
        two.run(300)
        checkpoint.write(two, path)
        before = two.state(gather=True)
        two.run(200)
        after2 = two.state(gather=True)
        sub.Free()
    quiet_barrier(comm)                # ranks 2.. sleep while 0 and 1 run
    many = _drift_scene(comm, bodies=False)
    assert many.dec.dims[0] == 2 and many.global_radius < 0.15
    checkpoint.restore(many, checkpoint.read(path, bodies=False))
    restored = many.state(gather=True)
    many.run(200)
    after_many = many.state(gather=True)
    if comm.rank == 0:
        mover = before["position"][before["uid"] == 1][0]
        assert 1.0 < mover[0] < 1.05                # past the cut, no rebuild since
        for k in ("uid", "position", "velocity", "angular_velocity", "orientation"):
            assert np.array_equal(before[k], restored[k]), k
            assert np.array_equal(after2[k], after_many[k]), k


def test_a_restart_on_another_rank_count_replaces_the_stored_blocks():
    """The stored config's ``[domain] blocks`` fit only its own rank count, and the user cannot
    edit the copy inside the checkpoint: a restart on another count uses parsim's blocks and
    says so (it was refused: "drop it to let parsim choose"); a fresh run is still refused."""
    import tomllib

    from parsim.config import ConfigError, build

    data = tomllib.loads(LAST_STRETCH.replace("walls = true", "walls = true\nblocks = [1, 2, 1]"))
    cfg = build(data, comm=None, restart=True)
    assert tuple(cfg.sim.dec.dims) == (1, 1, 1)
    assert cfg.notes == ["the config's [domain] blocks = [1, 2, 1] need 2 rank(s); on 1 the "
                         "restart uses blocks [1, 1, 1]"]
    with pytest.raises(ConfigError, match=r"\[domain\]\.blocks: = \[1, 2, 1\]"):
        build(data, comm=None)
