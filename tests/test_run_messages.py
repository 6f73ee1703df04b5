"""What a run tells its user: the warning about bodies overlapping at the start (also through
the API), the rate of the closing line (bodies of each step, also when all of them left), the
error of a body that went through a wall, and the note while the kernels compile."""

from __future__ import annotations

import io
import re
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import parsim
from parsim import runner
from parsim.comm import Net
from parsim.runner import run_config


def _pair(gap_fraction: float, comm="auto") -> parsim.Simulation:
    """Two spheres of radius 0.1 whose centres are (2 + gap_fraction) radii apart."""
    sim = parsim.Simulation(dt=1e-5, domain=((0, 0, 0), (1, 1, 1)), comm=comm)
    m = sim.add_material("g", density=2500.0, restitution=0.5, collision_time=1e-3)
    sim.add_sphere((0.5, 0.5, 0.3), 0.1, m)
    sim.add_sphere((0.5, 0.5, 0.3 + 0.1 * (2.0 + gap_fraction)), 0.1, m)
    return sim


def test_overlapping_spheres_added_through_the_api_warn_once():
    """Spheres overlapping by 60 % of their radius: the first run warns, naming the pair (as
    ``parsim run`` does for a config); the next run does not repeat it. Apart: no warning."""
    sim = _pair(-0.6)
    with pytest.warns(parsim.OverlapWarning, match=r"up to 60 % of the smaller radius "
                                                   r"\(uids 0 and 1\)"):
        sim.run(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sim.run(2)
        _pair(0.01).run(2)
        _pair(-0.04).run(2)          # 4 % is below the 5 % threshold


def _boxes_and_capsules(overlap: float, what: str) -> parsim.Simulation:
    """Body 1 overlapping body 0 by ``overlap`` (a length) along z: box on box (half-extents
    0.2, 0.2, 0.1: the smallest 0.1), capsule (radius 0.05) on box, or box resting in a floor
    plane (then body 0 is the plane)."""
    sim = parsim.Simulation(dt=1e-5, domain=((-1, -1, -1), (1, 1, 1)))
    m = sim.add_material("g", density=2500.0, restitution=0.5, collision_time=1e-3)
    if what == "plane":
        sim.add_plane((0, 0, -0.5), (0, 0, 1), m)
        sim.add_box((0.0, 0.0, -0.4 - overlap), (0.2, 0.2, 0.1), material=m)
        return sim
    sim.add_box((0.0, 0.0, 0.0), (0.2, 0.2, 0.1), material=m)
    if what == "box":
        sim.add_box((0.05, 0.0, 0.2 - overlap), (0.2, 0.2, 0.1), material=m)
    else:
        sim.add_capsule((0.05, 0.0, 0.15 - overlap), 0.05, 0.2, material=m)
    return sim


@pytest.mark.parametrize("what, size, label", [
    ("box", 0.1, "size \\(a box's smallest half-extent\\)"),
    ("capsule", 0.05, "size \\(a box's smallest half-extent\\)"),
    ("plane", 0.1, "size \\(a box's smallest half-extent\\)")])
def test_overlapping_boxes_and_capsules_warn_too(what, size, label):
    """The start-of-run warning covers every shape, not only spheres: the narrow phase's
    deepest point over the smaller size (until 2026-11-25 boxes and capsules were not looked
    at). 30 % warns with the percentage, 2 % does not."""
    with pytest.warns(parsim.OverlapWarning, match=rf"up to 30 % of the smaller {label} "
                                                   r"\(uids 0 and 1\)"):
        _boxes_and_capsules(0.3 * size, what).run(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _boxes_and_capsules(0.02 * size, what).run(1)


def _body_steps_by_hand(sim, steps: int) -> tuple[int, int]:
    """(bodies present at the start of each step, summed; the simulation's own count)."""
    net = sim.net
    start = net.isum(sim.body_steps)
    by_hand = 0
    for _ in range(steps):
        by_hand += sim.count_bodies()
        sim.run(1)
    return by_hand, net.isum(sim.body_steps) - start


def _leaving(comm="auto") -> parsim.Simulation:
    """Spheres shot out of an open domain one after another (outflow = "delete"), and a plane
    they do not touch (planes are kept by every rank)."""
    sim = parsim.Simulation(dt=5e-4, gravity=(0, 0, -9.81), domain=((0, 0, 0), (1, 1, 1)),
                            outflow="delete", comm=comm)
    m = sim.add_material("g", density=2500.0, restitution=0.5, collision_time=1e-2)
    n = 12
    x = np.linspace(0.05, 0.95, n)
    centers = np.column_stack([x, np.full(n, 0.5), np.full(n, 0.9)])
    vel = np.column_stack([np.zeros(n), np.zeros(n), -np.linspace(4.0, 20.0, n)])
    sim.add_spheres(centers, np.full(n, 0.02), m, velocities=vel)
    sim.add_plane((0, 0, 0), (1, 0, 0), m)
    return sim


def test_the_rate_counts_the_bodies_of_every_step():
    """``body_steps`` (the closing line's particle-steps) is the number of bodies present at
    the start of each step, summed: equal to counting them step by step, while they leave."""
    sim = _leaving()
    n0 = sim.count_bodies()
    by_hand, counted = _body_steps_by_hand(sim, 300)
    assert sim.deleted > 0 and sim.count_bodies() < n0     # the count changed on the way
    assert counted == by_hand


@pytest.mark.mpi(min_size=2)
def test_the_rate_counts_every_body_once_on_several_ranks(comm):
    """The same on several ranks: the ranks' counts add up to the bodies of each step, each
    plane once (planes are kept by every rank)."""
    sim = _leaving(comm)
    by_hand, counted = _body_steps_by_hand(sim, 300)
    deleted = sim.net.isum(sim.deleted)
    assert deleted > 0
    assert counted == by_hand


def test_a_run_whose_bodies_all_left_reports_their_rate(tmp_path):
    """When every body has left by the end, the closing line's rate is still that of the bodies
    the steps had (it used to multiply by the final count: 0 particle-steps/s). Planes are
    counted apart ("100 bodies + 1 plane"; they were counted as bodies)."""
    cfg = tmp_path / "gone.toml"
    cfg.write_text("""
[simulation]
dt = 1e-4
steps = 300
gravity = [0.0, 0.0, -9.81]
outflow = "delete"

[domain]
lo = [0.0, 0.0, 0.0]
hi = [0.1, 0.1, 0.05]

[[materials]]
name = "g"
density = 2500.0
restitution = 0.5
collision_time = 1e-3

[[walls]]
point = [0.0, 0.0, 0.0]
normal = [1.0, 0.0, 0.0]
material = "g"

[[bodies]]
kind = "lattice"
shape = "sphere"
radius = 0.003
spacing = 0.01
region = [[0.0, 0.0, 0.01], [0.1, 0.1, 0.02]]
velocity = [0.0, 0.0, -1.0]
""")
    out = io.StringIO()
    assert run_config(str(cfg), str(tmp_path / "run"), stream=out) == 0
    text = out.getvalue()
    # (a kernel compiled mid-run, as on a cold cache, adds "(of which ...)" after the time)
    done = re.search(r"done: 300 steps in \S+ s (?:\(of which [^)]*\) )?\((\S+) "
                     r"particle-steps/s.*?(\d+) bodies deleted", text)
    assert done, text
    assert int(done.group(2)) == 100 and float(done.group(1)) > 0.0, text
    # the header and the progress lines count the plane apart from the bodies
    assert ": 100 bodies + 1 plane, 300 steps" in text and "  0 bodies + 1 plane  " in text, text


def test_a_restart_reports_the_bodies_deleted_in_its_own_steps(tmp_path):
    """Layers of spheres falling out of an open floor: a restart's closing line counts the
    bodies deleted in its own steps and, apart, those since step 0 (it gave the count since
    step 0 as if of its steps; found by a rank-count fuzzer). A fresh run says the count alone."""
    from parsim.io import open_run

    cfg = tmp_path / "fall.toml"
    cfg.write_text("""
[simulation]
dt = 1e-4
steps = 300
outflow = "delete"

[domain]
lo = [0.0, 0.0, 0.0]
hi = [0.1, 0.1, 0.1]

[output]
every = 150
checkpoint_every = 150

[[materials]]
name = "g"
density = 2500.0
restitution = 0.5
collision_time = 1e-3

[[bodies]]
kind = "lattice"
shape = "sphere"
radius = 0.002
spacing = 0.01
region = [[0.0, 0.0, 0.0], [0.1, 0.1, 0.1]]
velocity = [0.0, 0.0, -0.7]
""")
    first = io.StringIO()
    assert run_config(str(cfg), str(tmp_path / "run"), stream=first) == 0
    counts = [open_run(tmp_path / "run").snapshot(s)["uid"].size for s in (0, 150, 300)]
    before, during = counts[0] - counts[1], counts[1] - counts[2]
    assert before > 0 and during > 0, counts
    assert re.search(rf"done: 300 steps .*; {before + during} bodies deleted by outflow; ",
                     first.getvalue()), first.getvalue()
    again = io.StringIO()
    ck = tmp_path / "run" / "checkpoints" / "checkpoint_0000000150.h5"
    assert runner.restart(str(ck), str(tmp_path / "again"), stream=again) == 0
    assert re.search(rf"done: 150 steps .*; {during} bodies deleted by outflow "
                     rf"\({before + during} since step 0\); ", again.getvalue()), again.getvalue()


def _shot_at_the_floor(with_plane: bool) -> parsim.Simulation:
    """A fast sphere at a soft floor: its overlap grows beyond its radius, its centre passes
    z = 0 (the domain's bottom, outflow = "error")."""
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (1, 1, 1)))
    m = sim.add_material("soft", density=2500.0, restitution=0.5, collision_time=1e-2)
    sim.add_sphere((0.5, 0.5, 0.05), 0.01, m, velocity=(0.0, 0.0, -20.0))
    if with_plane:
        sim.add_plane((0.5, 0.5, 0.0), (0, 0, 1), m)
    return sim


def test_a_body_through_a_wall_is_named_with_the_fix():
    """The error names the plane the body went through and says the contact is too soft; a
    body leaving where there is no wall gets the outflow hint instead."""
    sim = _shot_at_the_floor(True)
    with pytest.raises(parsim.SimulationError,
                       match=r"left the domain .* through the plane uid 1 \(point \(0\.5, 0\.5, "
                             r"0\), normal \(0, 0, 1\)\) .*too soft") as e:
        sim.run(200)
    assert "outflow = 'delete'" not in str(e.value)
    with pytest.raises(parsim.SimulationError, match=r"left the domain .*outflow = 'delete'"):
        _shot_at_the_floor(False).run(200)


def test_a_long_compile_is_announced(monkeypatch, capsys):
    """Loading the kernels longer than COMPILE_NOTE_AFTER prints what is happening and, at the
    end, how long it took; a quick load prints nothing."""
    from parsim import warmup

    monkeypatch.setattr(warmup, "compile_kernels", lambda: time.sleep(0.3))
    monkeypatch.setattr(runner, "COMPILE_NOTE_AFTER", 0.05)
    runner._prepare_ranks(Net(None))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("parsim: compiling the numba kernels (the first run")
    assert lines[1] == "parsim: kernels ready after 0 s"
    monkeypatch.setattr(runner, "COMPILE_NOTE_AFTER", 5.0)
    runner._prepare_ranks(Net(None))
    assert capsys.readouterr().out == ""


def test_info_shows_the_domain_gravity_and_densities(tmp_path):
    """``parsim info`` of a run lists the domain, periodic axes, gravity and densities the
    snapshot file stores (a scripted run has no config text to show them)."""
    from parsim.io import describe

    cfg = tmp_path / "c.toml"
    cfg.write_text("""
[simulation]
dt = 1e-4
steps = 2
gravity = [0.0, -9.81, 0.0]

[domain]
lo = [0.0, -1.0, 0.0]
hi = [0.1, 0.5, 0.2]
periodic = [true, false, false]

[[materials]]
name = "g"
density = 2500.0
restitution = 0.5
collision_time = 1e-3

[[bodies]]
kind = "lattice"
shape = "sphere"
radius = 0.003
spacing = 0.02
region = [[0.0, 0.0, 0.0], [0.1, 0.1, 0.1]]
""")
    assert run_config(str(cfg), str(tmp_path / "run"), stream=io.StringIO()) == 0
    text = describe(tmp_path / "run")
    assert ("domain: (0, -1, 0) to (0.1, 0.5, 0.2), periodic [True, False, False]; gravity "
            "(0, -9.81, 0)") in text, text
    assert "materials (density): g 2500" in text, text
    # a reader that stops early (`parsim info DIR | head`): no traceback, exit status 0
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(parsim.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, "-m", "parsim", "info", str(tmp_path / "run")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    p.stdout.close()                   # closed before the child writes (its imports take long)
    err = p.stderr.read().decode()
    assert p.wait() == 0 and "Traceback" not in err, err
