"""Bad input to ``parsim run`` / ``parsim restart``: a clear error naming the file, field or flag
and the fix, exit status 2, and nothing written so far changed (cases found by feeding the CLI
broken configs, files and directories)."""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path

import numpy as np
import pytest

from parsim.config import ConfigError, load
from parsim.runner import restart, run_config
from parsim.io import open_run

BASE = """
[simulation]
dt = 1e-4
steps = 40
gravity = [0.0, 0.0, -9.81]
seed = 2

[domain]
lo = [0.0, 0.0, 0.0]
hi = [0.1, 0.1, 0.2]
periodic = [true, true, false]

[output]
every = 20

[[materials]]
name = "glass"
density = 2500.0
restitution = 0.5
collision_time = 2e-3
friction = 0.5

[[walls]]
point = [0.0, 0.0, 0.0]
normal = [0.0, 0.0, 1.0]
material = "glass"
"""

BODIES = """
[[bodies]]
kind = "lattice"
shape = "sphere"
radius = 0.0025
spacing = 0.01
region = [[0.0, 0.0, 0.01], [0.1, 0.1, 0.03]]
random_velocity = 0.05
"""

QUIET = io.StringIO()


def _write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _digest(d: Path) -> dict:
    """Every file under ``d`` with the sha1 of its bytes."""
    return {str(p.relative_to(d)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def _refused(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run of BASE + BODIES: snapshots at 0, 20, 40; checkpoints at 20 and 40."""
    d = tmp_path_factory.mktemp("finished")
    cfg = _write(d, BASE + BODIES)
    assert run_config(str(cfg), str(d / "run"), stream=QUIET, checkpoint_every=20) == 0
    return cfg, d / "run"


def test_run_into_an_earlier_run_is_refused_and_changes_nothing(finished, tmp_path, capsys):
    cfg, run = finished
    d = shutil.copytree(run, tmp_path / "again")
    before = _digest(d)
    code = run_config(str(cfg), str(d), steps=10, stream=QUIET)
    _refused(capsys, code, str(d), "holds an earlier run", "--overwrite",
             "parsim restart " + str(d / "checkpoints" / "checkpoint_0000000040.h5"))
    assert _digest(d) == before
    # without checkpoints there is nothing to restart: the refusal does not suggest it
    shutil.rmtree(d / "checkpoints")
    code = run_config(str(cfg), str(d), steps=10, stream=QUIET)
    _refused(capsys, code, str(d), "holds an earlier run", "has no checkpoint to continue from")


def test_overwrite_replaces_the_earlier_run_and_only_it(finished, tmp_path):
    cfg, run = finished
    d = shutil.copytree(run, tmp_path / "again")
    (d / "notes.txt").write_text("mine")
    assert run_config(str(cfg), str(d), steps=10, stream=QUIET, overwrite=True) == 0
    from parsim import io as pio

    with pio.open_run(d) as r:
        assert list(r.steps) == [0, 10]
    assert not (d / "checkpoints").exists()     # the earlier run's checkpoints are gone
    assert (d / "notes.txt").read_text() == "mine"


def test_output_that_is_a_file_is_refused(finished, tmp_path, capsys):
    cfg, _ = finished
    f = tmp_path / "afile"
    f.write_text("keep me")
    code = run_config(str(cfg), str(f), steps=10, stream=QUIET)
    _refused(capsys, code, "is a file, not a directory")
    assert f.read_text() == "keep me"


@pytest.mark.parametrize("steps", [20, 30, 40], ids=["at_checkpoint", "below_later", "at_end"])
def test_restart_with_nothing_to_run_is_refused_and_changes_nothing(finished, tmp_path, capsys,
                                                                    steps):
    """``--steps`` is the total step count: at or below the checkpoint's step there is nothing
    to run (it used to truncate the later snapshots and report success)."""
    _, run = finished
    d = shutil.copytree(run, tmp_path / "r")
    before = _digest(d)
    ck = sorted((d / "checkpoints").glob("checkpoint_*.h5"))[-1 if steps == 40 else 0]
    code = restart(str(ck), steps=steps if steps != 30 else 10, stream=QUIET)
    _refused(capsys, code, "leaves nothing to run", "--steps above")
    assert _digest(d) == before


def test_a_time_step_too_large_is_refused_before_anything_is_written(tmp_path, capsys):
    cfg = _write(tmp_path, BASE.replace("dt = 1e-4", "dt = 1e-2") + BODIES)
    code = run_config(str(cfg), str(tmp_path / "out"), stream=QUIET)
    _refused(capsys, code, str(cfg), "dt = 0.01", "allow_large_dt = true")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["not_utf8", "region_text", "region_nan", "bool_in_vector",
                                  "bool_weights", "typo", "no_bodies", "npz_not_data",
                                  "path_is_dir", "spacing_beyond_uids", "spacing_beyond_memory",
                                  "spacing_overlaps", "radius_tiny", "count_beyond_memory"])
def test_bad_configs_name_the_file_and_field(tmp_path, case):
    body = BODIES
    expect = []
    if case == "not_utf8":
        p = tmp_path / "c.toml"
        p.write_bytes((BASE + "# caf\xe9\n").encode("latin-1"))
        expect = ["not UTF-8", "UTF-8"]
    elif case == "region_text":
        body = BODIES.replace("[[0.0, 0.0, 0.01]", '[["a", 0.0, 0.01]')
        expect = ["[[bodies]][0].region", "numbers"]
    elif case == "region_nan":
        body = BODIES.replace("[[0.0, 0.0, 0.01]", "[[nan, 0.0, 0.01]")
        expect = ["[[bodies]][0].region", "finite"]
    elif case == "bool_in_vector":
        expect = ["[simulation].gravity", "numbers"]
    elif case == "bool_weights":
        body = BODIES + 'scale = { distribution = "choice", values = [1.0, 0.8], ' \
                        "weights = [true, false] }\n"
        expect = ["weights", "numbers"]
    elif case == "typo":
        body = BODIES.replace("radius = 0.0025", "radious = 0.0025")
        expect = ["[[bodies]][0].radius", "'radious'", "typo"]
    elif case == "no_bodies":
        body = ""
        expect = ["creates no bodies"]
    # a lattice far too fine hung in its index arrays before it was refused (2026-11-29)
    elif case == "spacing_beyond_uids":
        body = BODIES.replace("spacing = 0.01", "spacing = 1e-9")
        expect = ["[[bodies]][0].spacing", "lattice points, more than parsim's uids"]
    elif case == "spacing_beyond_memory":
        body = BODIES.replace("spacing = 0.01", "spacing = 1e-5").replace("0.0025", "1e-6")
        expect = ["[[bodies]][0].spacing", "200,000,000,000 lattice points on rank 0", "GiB"]
    elif case == "spacing_overlaps":
        body = BODIES.replace("spacing = 0.01", "spacing = 1e-7")
        expect = ["[[bodies]][0].spacing", "bodies would overlap"]
    elif case == "count_beyond_memory":
        body = ('[[bodies]]\nkind = "random"\nshape = "sphere"\nradius = 0.0025\n'
                "count = 1000000000000\nregion = [[0.0, 0.0, 0.01], [0.1, 0.1, 0.03]]\n")
        expect = ["[[bodies]][0].count", "1,000,000,000,000 bodies", "GiB", 'placement = "local"']
    elif case == "radius_tiny":
        body = BODIES.replace("radius = 0.0025", "radius = 1e-300")
        expect = ["[[bodies]][0]", "sizes [1e-300]", "material 'glass'", "cannot invert"]
    elif case in ("npz_not_data", "path_is_dir"):
        target = tmp_path / "data.npz"
        if case == "npz_not_data":
            target.write_text("not an archive")
            expect = ["[[bodies]][0].path", "not a numpy .npz archive", "never unpickles"]
        else:
            target = tmp_path / "adir"
            target.mkdir()
            expect = ["[[bodies]][0].path", "is a directory"]
        body = (f'[[bodies]]\nkind = "file"\nshape = "sphere"\npath = "{target.name}"\n')
    if case != "not_utf8":
        text = BASE + body
        if case == "bool_in_vector":
            text = text.replace("gravity = [0.0, 0.0, -9.81]", "gravity = [true, 0.0, -9.81]")
        p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load(p)
    msg = str(e.value)
    assert msg.startswith(str(p)), msg
    for n in expect:
        assert n in msg, (n, msg)


def test_the_good_configs_of_these_cases_load(tmp_path):
    """The cases above differ from a config that loads only in the broken part."""
    assert load(_write(tmp_path, BASE + BODIES)).sim.count_bodies() == 1 + 200  # wall + lattice
    np.savez(tmp_path / "data.npz", position=[[0.05, 0.05, 0.05]], radius=[0.003])
    body = '[[bodies]]\nkind = "file"\nshape = "sphere"\npath = "data.npz"\n'
    assert load(_write(tmp_path, BASE + body, "d.toml")).sim.count_bodies() == 1 + 1


@pytest.mark.mpi(min_size=2)
def test_lattice_bodies_too_big_for_the_blocks_become_global(comm, mpi_tmp_path):
    """A lattice of bodies wider than a quarter of a block: on several ranks they are global
    bodies, every one on every rank. (Until 2026-11-28 every rank refused the config, with the
    [domain] blocks advice, though it ran on one rank; before that the error suggested an API
    call a config cannot make.)"""
    from parsim.bodies import GLOBAL

    text = (BASE.replace('periodic = [true, true, false]', 'walls = true')
            .split("[[walls]]")[0]
            + '[[bodies]]\nkind = "lattice"\nshape = "sphere"\nradius = 0.02\nspacing = 0.05\n'
              'region = [[0.0, 0.0, 0.0], [0.1, 0.1, 0.1]]\n')
    p = mpi_tmp_path / "thin.toml"
    if comm.rank == 0:                 # one writer; the others read it after the barrier
        p.write_text(text)
    comm.Barrier()
    sim = load(p).sim
    st = sim.st
    spheres = st.shape[: st.n_owned] == 0
    assert np.count_nonzero(spheres) == 8                     # the 2 x 2 x 2 lattice, here
    assert (st.flags[: st.n_owned][spheres] & GLOBAL).all()   # ... as global bodies
    assert sim.count_bodies() == 8 + 6                         # once each, with the walls


def test_info_reports_a_checkpoint_with_a_missing_or_truncated_part(finished, tmp_path):
    """``parsim info`` reads the manifest and checks every part (it reported such checkpoints as
    normal); the run directory's listing marks them unusable."""
    from parsim.checkpoint import CheckpointError, part_path
    from parsim.io import describe

    _, run = finished
    d = shutil.copytree(run, tmp_path / "r")
    first, last = sorted((d / "checkpoints").glob("checkpoint_*.h5"))
    assert "parsim checkpoint" in describe(first)           # intact
    part_path(first, 0).unlink()
    with pytest.raises(CheckpointError, match="is missing"):
        describe(first)
    p = part_path(last, 0)
    p.write_bytes(p.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="not a readable HDF5 file"):
        describe(last)
    listing = describe(d)
    assert listing.count("UNUSABLE") == 2 and "snapshots: 3" in listing, listing


def test_overlapping_bodies_at_the_start_are_reported(tmp_path, capsys):
    """Spheres from a file that overlap by much of their radius: the run goes on (it may be
    meant) but says so, naming the worst pair; the same spheres apart give no warning."""
    pos = np.array([[0.05, 0.05, 0.05], [0.054, 0.05, 0.05], [0.02, 0.02, 0.1]])
    for name, p, warned in (("close", pos, True), ("apart", pos + [[0, 0, 0], [0.01, 0, 0],
                                                                     [0, 0, 0]], False)):
        np.savez(tmp_path / f"{name}.npz", position=p, radius=[0.003, 0.003, 0.003])
        body = f'[[bodies]]\nkind = "file"\nshape = "sphere"\npath = "{name}.npz"\n'
        cfg = _write(tmp_path, BASE + body, f"{name}.toml")
        assert run_config(str(cfg), str(tmp_path / name), steps=2, stream=QUIET) == 0
        err = capsys.readouterr().err
        assert ("overlap at the start, up to 66.7 % of the smaller radius (uids 1 and 2)"
                in err) == warned, err


def test_restart_into_another_run_is_refused(finished, tmp_path, capsys):
    """``parsim restart --output DIR`` with a DIR other than the checkpoint's own run directory
    that holds a run would mix two runs' snapshots: refused, both directories unchanged; an
    empty DIR (or the run's own directory) is fine."""
    _, run = finished
    mine, other = shutil.copytree(run, tmp_path / "mine"), shutil.copytree(run, tmp_path / "other")
    before = (_digest(mine), _digest(other))
    ck = sorted((mine / "checkpoints").glob("checkpoint_*.h5"))[0]
    code = restart(str(ck), str(other), steps=40, stream=QUIET)
    _refused(capsys, code, str(other), "holds an earlier run", "its own run directory")
    assert (_digest(mine), _digest(other)) == before
    assert restart(str(ck), str(tmp_path / "fresh"), steps=40, stream=QUIET) == 0
    # the new directory starts with a snapshot of the checkpoint's state (since 2026-11-24),
    # equal to the run's own snapshot of that step
    fresh, orig = open_run(tmp_path / "fresh"), open_run(run)
    assert fresh.steps == [20, 40]
    for s in (20, 40):
        a, b = fresh.snapshot(s), orig.snapshot(s)
        assert all(np.array_equal(a[k], b[k]) for k in ("uid", "position", "velocity",
                                                         "angular_velocity", "orientation")), s
    assert restart(str(ck), str(mine), steps=40, stream=QUIET) == 0
