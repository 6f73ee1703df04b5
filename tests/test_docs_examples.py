"""The code examples of the documentation (README.md, docs/*.md, configs/README.md,
jobs/README.md) do what they show.

Every fenced block of those files is an entry of :data:`EXAMPLES`, by file and position, with a
string the block must contain (an inserted block then cannot shift another's entry unnoticed)
and either a check or the reason it is not run. `test_every_example_is_listed` fails on a block
that has no entry and on an entry whose block is gone, so the list cannot rot. Python blocks are
executed in a fresh temporary directory (files they write land there); the TOML config is loaded
with ``parsim.config.load`` and stepped; cheap shell commands run as subprocesses, shortened with
``--steps`` where they would run for minutes, with this checkout's parsim (``PYTHONPATH``) and
numba cache. The run that README's and output.md's readers expect in ``output/demo`` is
README's quick-start command itself (2 ranks, 40 steps), made once per module.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"
DOC_FILES = ("README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")),
             "configs/README.md", "jobs/README.md")
DEMO_STEPS = 40        # README's quick start, shortened from the config's 20,000 steps


# ---- the blocks ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    file: str          # relative to the repository
    index: int         # position among the file's fenced blocks, from 0
    line: int          # line of the opening fence, from 1
    lang: str          # first word of the info string, "" if none
    text: str          # the lines between the fences, less the fence's indentation


_FENCE = re.compile(r"^( *)(`{3,})\s*([^\s`]*)[^`]*$")


def code_blocks(file: str) -> list[Block]:
    """The fenced (```) blocks of a markdown file, in order; an unclosed fence is an error."""
    lines = (REPO / file).read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, lang = len(m[1]), len(m[2]), m[3]
        close = re.compile(rf"^ *`{{{ticks},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        assert j < len(lines), f"{file}:{i + 1}: code fence never closed"
        body = [re.sub(rf"^ {{0,{indent}}}", "", ln) for ln in lines[i + 1:j]]
        blocks.append(Block(file, len(blocks), i + 1, lang, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def block(file: str, index: int) -> Block:
    return code_blocks(file)[index]


# ---- running things ----------------------------------------------------------------------------
def _env(**extra) -> dict:
    """Subprocess environment: this checkout's parsim, the suite's numba cache, one thread."""
    path = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    cache = os.path.abspath(os.environ.get("NUMBA_CACHE_DIR", REPO / ".numba_cache"))
    env = dict(os.environ, PYTHONPATH=path, NUMBA_CACHE_DIR=cache, NUMBA_NUM_THREADS="1",
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def command(line: str, subs: dict[str, str] | None = None) -> tuple[dict, list[str]]:
    """(extra environment, argv) of one documented shell command, runnable from any directory:
    leading ``NAME=value`` words become environment (``NUMBA_CACHE_DIR`` stays the suite's),
    ``.venv/bin/X`` is the interpreter's directory, ``parsim`` is ``python -m parsim``, paths
    into scripts/, configs/ and jobs/ point into the repository; ``[optional]`` brackets are
    dropped and ``subs`` replaces whole words (placeholders such as DIR)."""
    for old, new in (subs or {}).items():
        line = re.sub(rf"(?<![\w.-]){re.escape(old)}(?![\w-])", new, line)
    words = [w.strip("[]") for w in shlex.split(line, comments=True)]
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, value = words.pop(0).split("=", 1)
        if name != "NUMBA_CACHE_DIR":
            env[name] = value
    argv = []
    for w in words:
        if w.startswith(".venv/bin/"):
            w = str(BIN / w.removeprefix(".venv/bin/"))
        elif w.split("/")[0] in ("scripts", "configs", "jobs"):
            w = str(REPO / w)
        argv += [sys.executable, "-m", "parsim"] if w == "parsim" and not argv else [w]
    return env, argv


def sh(line: str, cwd: Path, subs=None, extra_env=None, timeout=120) -> subprocess.CompletedProcess:
    """Run one documented command (see :func:`command`) in ``cwd``; it must exit 0."""
    env, argv = command(line, subs)
    r = subprocess.run(argv, cwd=cwd, env=_env(**env, **(extra_env or {})), capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, f"{argv} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def run_python(b: Block, edit: tuple[str, str] | None = None, ns: dict | None = None) -> dict:
    """Execute a python block in the current directory; its namespace."""
    src = b.text
    if edit:
        assert edit[0] in src, f"{b.file}:{b.line}: no {edit[0]!r} to fill in"
        src = src.replace(*edit)
    ns = dict(ns or {}, __name__="doc_example")
    exec(compile(src, f"{b.file} (block at line {b.line})", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    """README's first quick-start command (`mpiexec -n 2 ... parsim run configs/demo.toml
    --overwrite`) without the install, with `--steps 40 --checkpoint-every 20` (the config runs
    20,000 steps; the checkpoints are what output.md's reader lists); its `output/demo`."""
    if not MPIEXEC.exists():
        pytest.skip("needs the mpiexec next to the interpreter (the mpich extra)")
    cwd = tmp_path_factory.mktemp("quickstart")
    line = block("README.md", 0).text.strip().split(" && ")[-1]
    sh(f"{line} --steps {DEMO_STEPS} --checkpoint-every 20", cwd, timeout=300)
    return cwd / "output" / "demo"


def _with_demo(request, tmp_path: Path) -> Path:
    """A copy of the quick-start run as `output/demo` of this example's directory."""
    shutil.copytree(request.getfixturevalue("demo_run"), tmp_path / "output" / "demo")
    return tmp_path / "output" / "demo"


# ---- the checks, one per block that is run ------------------------------------------------------
def quickstart_run(b, tmp_path, request):
    """The 2-rank run ends `done` with snapshots at 0 and the last step in
    output/demo/snapshots.h5, written by 2 ranks, each owning one half of the box."""
    import h5py

    from parsim.io import open_run

    d = _with_demo(request, tmp_path)
    assert (d / "status").read_text().split() == ["done"]
    with h5py.File(d / "snapshots.h5", "r") as f:
        assert sorted(int(s) for s in f["snapshots"]) == [0, DEMO_STEPS]
        assert f[f"snapshots/{DEMO_STEPS:010d}"].attrs["ranks"] == 2
    with open_run(d) as run:
        snap = run.snapshot(-1)
    finite = snap["shape"] != 3                                    # planes: on every rank
    pos, rank = snap["position"][finite], snap["rank"][finite]
    half, slack = (0.3, 0.3, 0.6), 0.003         # the demo's domain / 2; its skin / 2: bodies
    assert any(((pos[:, k] > half[k] - slack) | (rank == 0)).all()    # migrate at rebuilds
               and ((pos[:, k] < half[k] + slack) | (rank == 1)).all() for k in range(3))
    assert set(rank.tolist()) == {0, 1}


def same_as_ci(b, tmp_path, request):
    """Not run (it installs and runs the whole suite, minutes): README calls it exactly what
    CI runs, and .ci/run says to keep the two identical."""
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert b.text.strip() == ci


def same_as_readme_quickstart(b, tmp_path, request):
    """Not run (the whole suite): development.md calls it README's second quick-start command."""
    assert b.text == block("README.md", 1).text


def readme_reader(b, tmp_path, request):
    """Reads the quick-start run; the snapshot holds the fields the comment names."""
    _with_demo(request, tmp_path)
    ns = run_python(b)
    named = re.findall(r"\w+", b.text.split("snapshot(-1)")[1])
    assert len(named) == 6 and set(named) <= set(ns["snap"])
    assert ns["snap"]["step"] == DEMO_STEPS


def bench_options(b, tmp_path, request):
    """Not run: a benchmark (minutes) and a package install. Checked: the script's --help lists
    the options used."""
    checked = 0
    for line in b.text.strip().splitlines():
        env, argv = command(line)
        if not argv[1].endswith(".py"):
            continue                                           # pip install
        help_text = sh(f"{line.split(' --')[0]} --help", tmp_path).stdout
        for opt in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
            assert opt in help_text, f"{argv[1]} --help does not list {opt}"
            checked += 1
    assert checked


def analyze_commands(b, tmp_path, request):
    """Both commands on the quick-start run (the second with DIR, OUTDIR and a step the short
    run has); they write the summary and the CSV files where the page says."""
    _with_demo(request, tmp_path)
    first, second = b.text.strip().splitlines()
    sh(first, tmp_path)
    analysis = tmp_path / "output" / "demo" / "analysis"
    for name in ("summary.txt", "timeseries.csv", "profile.csv"):
        assert (analysis / name).is_file(), name
    sh(second, tmp_path, subs={"DIR": "output/demo", "OUTDIR": "elsewhere",
                               "10000": str(DEMO_STEPS)})
    assert (tmp_path / "elsewhere" / "summary.txt").is_file()


_NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def analyze_summary(b, tmp_path, request):
    """The sample summary (of the full 20,000-step run) has the lines the script prints for
    the quick-start run, numbers aside, up to its `...`."""
    _with_demo(request, tmp_path)
    out = sh(block("docs/analysis.md", 0).text.splitlines()[0], tmp_path).stdout.splitlines()
    shown = b.text.splitlines()
    shown = shown[:shown.index("  ...")]
    assert len(out) >= len(shown)
    for doc_line, line in zip(shown, out):
        parts = re.split(f"({_NUMBER})", doc_line)
        pattern = "".join(_NUMBER if k % 2 else re.escape(p) for k, p in enumerate(parts))
        assert re.fullmatch(pattern, line), f"documented:\n{doc_line}\nprinted:\n{line}"


def broadphase_api(b, tmp_path, request):
    """The tour of the broad-phase interface runs; the results have the documented form."""
    import numpy as np

    ns = run_python(b)
    pairs = ns["pairs"]
    assert pairs.dtype == np.int64 and pairs.shape[1] == 2 and (pairs[:, 0] < pairs[:, 1]).all()
    assert (pairs[:, 1] == 10_000).sum() == 10_000     # the plane pairs with every body
    for ids in (ns["near"], ns["ball"]):
        assert (np.diff(ids) > 0).all()
    assert (np.diff(ns["t_enter"]) >= 0).all() and len(ns["hit_ids"]) == len(ns["t_enter"])


def config_tables(b, tmp_path, request):
    """The annotated config is complete: with its `blocks = [2, 1, 1]` it is refused on one
    rank (product = ranks, as its comment says; the MPI session loads it as is on 2 ranks);
    with one block it loads and runs 10 steps."""
    from parsim.config import ConfigError, load

    assert b.text.count("blocks = [2, 1, 1]") == 1
    (tmp_path / "as_shown.toml").write_text(b.text)
    with pytest.raises(ConfigError, match=r"blocks.*number of MPI ranks \(1\)"):
        load(tmp_path / "as_shown.toml")
    (tmp_path / "serial.toml").write_text(b.text.replace("[2, 1, 1]", "[1, 1, 1]"))
    cfg = load(tmp_path / "serial.toml")
    assert cfg.steps == 20000 and [m.name for m in cfg.sim.materials] == ["glass"]
    assert cfg.sim.count_bodies() == 1000 + 1                # the random spheres and one wall
    cfg.sim.run(10)
    assert cfg.sim.step_count == 10


def mpi_test_template(b, tmp_path, request):
    """The MPI test template is valid Python and marks its test as pytest-mpi expects."""
    ns = run_python(b, ns={"pytest": pytest})
    (mark,) = ns["test_something"].pytestmark
    assert mark.name == "mpi" and mark.kwargs == {"min_size": 2}


def rank_command(b, tmp_path, request):
    """Not run (the suite's own MPI session): every word of it is in the command that
    scripts/run_tests.sh gives each rank (`<dir>` is its $1, `<r>` its $r, `<files>` the rest)."""
    script = (REPO / "scripts" / "run_tests.sh").read_text().replace('"', "")
    words = (b.text.replace("\\\n", " ").replace("<dir>", "$1").replace("<r>", "$r")
             .replace("<files>", "${@:2}").split())
    assert words[0] == "python"
    for w in words[1:]:
        assert w in script, f"run_tests.sh does not pass {w}"
    assert " ".join(words[1:9]) in script                    # in this order


def inspect_asm(b, tmp_path, request):
    """The reference-count check compiles the kernel afresh and counts the calls, with the
    elided call made with the arguments the engine passed in a 2-sphere collision."""
    import warnings

    import numpy as np

    import parsim
    import parsim.simulation as S

    captured = []
    serial = S.sphere_pair_forces[0]

    def record(*args):
        captured.append(args)
        return serial(*args)

    request.getfixturevalue("monkeypatch").setattr(S, "sphere_pair_forces", (record, record))
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (1, 1, 1)), comm=None)
    glass = sim.add_material("glass", density=2500.0, restitution=0.5, collision_time=1e-3)
    sim.add_spheres(np.array([[0.3, 0.5, 0.5], [0.39, 0.5, 0.5]]), 0.05, glass)
    with warnings.catch_warnings():      # the overlap is wanted: a collision to record
        warnings.simplefilter("ignore", parsim.OverlapWarning)
        sim.run(2)
    assert captured, "the engine did not call sphere_pair_forces"
    ns = run_python(b, edit=("# ... call f once with real arguments, then:", "f(*ARGS)"),
                    ns={"ARGS": captured[0]})
    assert len(ns["f"].signatures) == 1 and "_sphere_pair_forces" in ns["asm"]  # its assembly


def engine_api(b, tmp_path, request):
    """The scripting tour runs: uids in order of addition, `state()` has the fields its comment
    lists, and the other members the page names exist."""
    ns = run_python(b)
    sim, s = ns["sim"], ns["s"]
    assert (ns["a"], ns["b"], ns["c"]) == (0, 1, 2)
    listed = re.findall(r"\w+", b.text.split("sorted by uid:")[1].replace("#", ""))
    assert list(s) == listed and len(listed) == 11
    assert s["uid"].tolist() == [0, 1, 2, 3] and sim.step_count == 100
    assert sim.kinetic_energy() > 0 and sim.count_contacts() == 0 and sim.n_contacts == 0
    assert sim.deleted == 0 and sim.memory_bytes() > 0 and sim.time == pytest.approx(0.01)
    assert set(sim.timers) >= {"neighbours", "contacts", "integration"}


def snapshot_layout(b, tmp_path, request):
    """The quick-start run's snapshots.h5 has exactly the groups, attributes, datasets, dtypes
    and trailing shapes the layout shows."""
    import h5py
    import numpy as np

    d = _with_demo(request, tmp_path)
    text = b.text
    root_attrs = re.search(r"^/ +attrs (.*?)\n/config", text, re.S | re.M)[1]
    root_attrs = {w.split()[0] for w in root_attrs.split(",")}
    group_attrs = set(re.search(r"^/snapshots/\d+/ +attrs (.*)$", text, re.M)[1].split(", "))
    fields = {}
    for names, dtype, shape in re.findall(r"^ {4}([a-z_]+(?:, [a-z_]+)*) +(\w+)\[n(,\d)?\]",
                                          text, re.M):
        for name in names.split(", "):
            fields[name] = (np.dtype(dtype), () if not shape else (int(shape[1:]),))
    with h5py.File(d / "snapshots.h5", "r") as f:
        assert set(f.attrs) == root_attrs
        assert f.attrs["format"] == "parsim-snapshots" and f.attrs["format_version"] == 2
        assert {"config", "materials", "timings", "snapshots"} == set(f)
        m = len(f["materials/names"])
        assert f["materials/table"].shape == (m, m, 8)
        assert all(f["timings"][k].shape == (3,) for k in f["timings"])
        for name, g in f["snapshots"].items():
            assert re.fullmatch(r"\d{10}", name) and set(g.attrs) == group_attrs
            assert set(g) == set(fields)
            for k, (dtype, tail) in fields.items():
                assert g[k].dtype == dtype and g[k].shape[1:] == tail, k


def reader_api(b, tmp_path, request):
    """The reading tour on the quick-start run: steps, a snapshot sorted by uid with the
    file's fields but vertex_index plus step, time and status, a series, the checkpoints
    (oldest first, named as shown) and per-phase timings."""
    import numpy as np

    _with_demo(request, tmp_path)
    ns = run_python(b)
    run, snap = ns["run"], ns["snap"]
    assert run.steps == [0, DEMO_STEPS] and ns["steps"].tolist() == run.steps
    assert (np.diff(snap["uid"]) > 0).all() and snap["step"] == DEMO_STEPS
    assert {"step", "time", "status", "wraps", "rank"} <= set(snap) and "vertex_index" not in snap
    assert len(ns["positions"]) == 2 and ns["positions"][1].shape == (snap["uid"].size, 3)
    assert [p.name for p in run.checkpoints] == ["checkpoint_0000000020.h5",
                                                 "checkpoint_0000000040.h5"]
    assert set(run.timings["contacts"]) == {"min", "mean", "max"}


def checkpoint_commands(b, tmp_path, request):
    """`parsim run` with checkpoints (demo config, 20 steps, K = 10), then `parsim restart`
    from the step-10 checkpoint to N = 30 in the same directory: it ends `done` at step 30;
    `parsim info` accepts the directory."""
    from parsim.io import open_run

    first, second = b.text.strip().splitlines()
    subs = {"CONFIG": "configs/demo.toml", "DIR": "run", "K": "10", "N": "30",
            "checkpoint_0000005000.h5": "checkpoint_0000000010.h5"}
    sh(first.split("#")[0] + " --steps 20", tmp_path, subs)
    assert (tmp_path / "run" / "checkpoints" / "checkpoint_0000000010.h5").is_file()
    sh(second, tmp_path, subs)
    assert (tmp_path / "run" / "status").read_text().split() == ["done"]
    with open_run(tmp_path / "run") as run:
        assert run.steps[-1] == 30 and 20 not in run.steps        # later snapshots replaced
    assert "status: done" in sh("parsim info run", tmp_path).stdout


def workstation(b, tmp_path, request):
    """workstation.sh with the demo config on 2 ranks (STEPS=20, into a temporary directory
    instead of the repository's output/): the run ends done, and the same command again finds
    it done."""
    if not MPIEXEC.exists():
        pytest.skip("needs the mpiexec next to the interpreter (the mpich extra)")
    out = tmp_path / "output" / "demo"
    extra = {"STEPS": "20", "CHECKPOINT_EVERY": "10", "PYTHON": sys.executable}
    r = sh(b.text.strip(), tmp_path, subs={"output/demo": str(out)}, extra_env=extra, timeout=300)
    assert f"parsim: {out}: done" in r.stdout
    assert (out / "status").read_text().split() == ["done"]
    r = sh(b.text.strip(), tmp_path, subs={"output/demo": str(out)}, extra_env=extra)
    assert "is done already" in r.stdout


def vectoriser_remarks(b, tmp_path, request):
    """The command that prints LLVM's loop-vectoriser remarks: the joint pass's rotation loop is
    vectorised for the target it names (znver3), no loop left as "not beneficial" (engine.md
    says so; a numba or LLVM whose cost model decides otherwise fails here)."""
    r = sh(b.text.strip(), tmp_path, timeout=300)
    out = r.stdout + r.stderr
    assert "vectorized loop" in out, out
    assert "not beneficial" not in out, out


# ---- the list -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Example:
    lang: str
    contains: str                      # the block must contain this: catches a shifted position
    check: Callable | None = None      # check(block, tmp_path, request), run in tmp_path
    skip: str = ""                     # why the block is not run (then no check)


EXAMPLES = {
    ("README.md", 0): Example("sh", "parsim run configs/demo.toml --overwrite", quickstart_run),
    ("README.md", 1): Example("sh", "bash scripts/run_tests.sh", same_as_ci),
    ("README.md", 2): Example("python", 'open_run("output/demo")', readme_reader),
    ("README.md", 3): Example("sh", "bench_broadphase.py --quick", bench_options),
    ("docs/analysis.md", 0): Example("sh", "analyze_run.py output/demo", analyze_commands),
    ("docs/analysis.md", 1): Example("", "run output/demo:", analyze_summary),
    ("docs/broadphase.md", 0): Example("python", "HierarchicalHashGrid(", broadphase_api),
    ("docs/configs.md", 0): Example("toml", "[simulation]", config_tables),
    ("docs/decomposition.md", 0): Example(
        "sh", "-n 4", skip="the 20,000-step demo on 4 ranks (minutes; README's quick start, the "
        "same command on 2 ranks, runs here shortened) and the suite's own MPI and serial "
        "sessions for these files (scripts/run_tests.sh runs them)"),
    ("docs/development.md", 0): Example("sh", "run_tests.sh", same_as_readme_quickstart),
    ("docs/development.md", 1): Example("sh", "--only-mpi -x", rank_command),
    ("docs/development.md", 2): Example("python", "@pytest.mark.mpi(min_size=2)",
                                        mpi_test_template),
    ("docs/development.md", 3): Example(
        "sh", "tests/test_mpi_smoke.py", skip="the suite's serial and 2-rank sessions of "
        "tests/test_mpi_smoke.py (scripts/run_tests.sh runs that file in both)"),
    ("docs/development.md", 4): Example("python", "inspect_asm", inspect_asm),
    ("docs/development.md", 5): Example(
        "sh", "break NRT_incref", skip="attaches gdb (not a dependency; Debian's gdb package) "
        "to a running process given by its PID; what it found is fixed and tested for bits "
        "(tests/test_unmanaged.py, the kernel and invariance tests)"),
    ("docs/engine.md", 0): Example("python", "parsim.Simulation(", engine_api),
    ("docs/engine.md", 1): Example("sh", "pass-remarks", vectoriser_remarks),
    ("docs/output.md", 0): Example("", "format_version = 2", snapshot_layout),
    ("docs/output.md", 1): Example(
        "sh", "pvbatch", skip="renders a PNG with ParaView under xvfb-run, which this test "
        "environment lacks; test_paraview_opens_the_output_of_two_ranks in "
        "tests/test_decomposition.py opens the XDMF with pvbatch where it is installed"),
    ("docs/output.md", 2): Example("python", "run.checkpoints", reader_api),
    ("docs/output.md", 3): Example("sh", "parsim restart", checkpoint_commands),
    ("jobs/README.md", 0): Example(
        "sh", "production.sbatch", skip="submits to SLURM for 24 h; tests/test_jobs.py runs "
        "production.sbatch with a stand-in launcher and sbatch, and under a real SLURM"),
    ("jobs/README.md", 1): Example(
        "sh", "PARSIM_SBATCH_ARGS", skip="submits to SLURM; tests/test_jobs.py checks the "
        "options passed on to the follow-up job with a stand-in sbatch"),
    ("jobs/README.md", 2): Example(
        "sh", "sweep.sbatch", skip="SLURM job arrays; tests/test_jobs.py runs one sweep.sbatch "
        "task with the stand-in launcher"),
    ("jobs/README.md", 3): Example("sh", "jobs/workstation.sh", workstation),
    ("jobs/README.md", 4): Example(
        "sh", "--no-binary mpi4py", skip="installs packages and rebuilds mpi4py against a "
        "cluster's MPI"),
    ("jobs/README.md", 5): Example(
        "sh", "weak_scaling.sbatch", skip="the weak-scaling benchmark on a SLURM cluster"),
}


def test_every_example_is_listed():
    """Every fenced block of the documentation has an entry (run, or skipped with a reason) and
    every entry still has its block, of the same kind, containing its marker."""
    found = {(b.file, b.index): b for f in DOC_FILES for b in code_blocks(f)}
    new = [f"{b.file}:{b.line} ({b.lang or 'text'})" for k, b in found.items() if k not in EXAMPLES]
    assert not new, f"code blocks neither run nor listed as skipped in EXAMPLES: {new}"
    gone = [k for k in EXAMPLES if k not in found]
    assert not gone, f"EXAMPLES lists blocks that are gone: {gone}"
    for key, ex in EXAMPLES.items():
        b = found[key]
        assert b.lang == ex.lang and ex.contains in b.text, \
            f"{b.file}:{b.line} is not the block listed as {key} (moved?)"
        assert (ex.check is None) != (not ex.skip), f"{key}: give a check or a reason to skip"


@pytest.mark.parametrize("key", [k for k, ex in EXAMPLES.items() if ex.check],
                         ids=lambda k: f"{k[0]}[{k[1]}]")
def test_example(key, tmp_path, monkeypatch, request):
    """The block runs (or is checked) as its entry says, in a fresh directory."""
    monkeypatch.chdir(tmp_path)
    EXAMPLES[key].check(block(*key), tmp_path, request)


def test_config_error_examples(tmp_path, monkeypatch, capsys):
    """The error messages configs.md quotes are the ones `parsim run` prints (exit status 2),
    for a zero radius and for a misspelt key, in docs/configs.md's own config."""
    from parsim.cli import main

    doc = (REPO / "docs" / "configs.md").read_text()
    base = block("docs/configs.md", 0).text.replace("blocks = [2, 1, 1]", "")
    quoted = re.search(r"^    (parsim: x\.toml: .*)$", doc, re.M)[1]
    typo = re.search(r"`(radius: is required \(the table has 'radious': a typo\?\))`",
                     re.sub(r"\s+", " ", doc))[1]                # an inline span, wrapped
    monkeypatch.chdir(tmp_path)
    for radius_line, expected in (("radius = 0 ", quoted), ("radious = 0.01 ", typo)):
        Path("x.toml").write_text(base.replace("radius = 0.01 ", radius_line, 1))
        assert main(["run", "x.toml"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.endswith(expected) and err.startswith("parsim: x.toml: "), err


def test_documented_parsim_options_exist():
    """Every `--option` written after `parsim run|restart|info|demo` in the documentation (code
    blocks and inline code) is an option of that subcommand."""
    from parsim.cli import build_parser

    subs = next(a for a in build_parser()._actions if a.choices and "run" in a.choices).choices
    seen = 0
    for f in DOC_FILES:
        for cmd, rest in re.findall(r"parsim (run|restart|info|demo)\b([^`\n]*)",
                                    (REPO / f).read_text()):
            for opt in re.findall(r"(?<![\w-])--[a-z][a-z-]*", rest):
                seen += 1
                assert opt in subs[cmd]._option_string_actions, f"{f}: parsim {cmd} {opt}"
    assert seen >= 10


@pytest.mark.mpi(min_size=2)
def test_config_tables_on_two_ranks(comm):
    """docs/configs.md's config as shown (`blocks = [2, 1, 1]`) builds on 2 ranks (the first two
    of the session) and runs 10 steps, with the serial body count."""
    import tomllib

    from parsim.config import build

    text = block("docs/configs.md", 0).text
    sub = comm.Split(0 if comm.rank < 2 else 1, comm.rank)
    result = None
    if comm.rank < 2:
        cfg = build(tomllib.loads(text), "configs.md", text, comm=sub)
        cfg.sim.run(10)
        result = (cfg.sim.count_bodies(), cfg.sim.step_count, sub.size)
    sub.Free()
    results = comm.allgather(result)
    assert results[:2] == [(1001, 10, 2)] * 2
