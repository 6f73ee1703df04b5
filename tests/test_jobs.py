"""The job scripts in jobs/: wall-time signal -> checkpoint -> resubmission -> exact restart.

Two ways:

* with a stand-in launcher (always): the scripts run under bash with ``PARSIM_LAUNCH`` = the
  venv's ``mpiexec -n 2`` and ``PARSIM_SUBMIT`` = a script that records the resubmission; the test
  sends SIGUSR1 to the ranks as SLURM's ``--signal`` would;
* under a real single-node SLURM (Debian's slurm-wlm and munge, started by the test as root), when
  those are installed (``.ci/run`` installs them): ``sbatch`` the production script, ``scancel
  --signal=USR1`` its step, let it resubmit itself with the real ``sbatch``, and check that the
  second job finishes the run.

Either way the final state equals an uninterrupted run's, bit for bit.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import extras
from parsim.io import open_run
from parsim.runner import run_config

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"
STATE = ("uid", "position", "velocity", "orientation", "angular_velocity", "wraps")

CONFIG = """
[simulation]
dt = 1e-4
steps = 2000
gravity = [0.0, 0.0, -9.81]
seed = 9
skin = 0.01

[domain]
lo = [0.0, 0.0, 0.0]
hi = [0.8, 0.4, 0.4]
walls = true

[output]
every = 500
progress_every = 25
keep_checkpoints = 2

[[materials]]
name = "glass"
density = 2500.0
restitution = 0.5
collision_time = 1e-3
friction = 0.4

[[bodies]]
kind = "random"
shape = "sphere"
material = "glass"
radius = 0.015
scale = { distribution = "uniform", min = 0.8, max = 1.0 }
region = [[0.02, 0.02, 0.02], [0.78, 0.38, 0.38]]
count = 500
random_velocity = 1.0
"""


def env_for(tmp_path, **extra) -> dict:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("SLURM_", "PMI_", "OMPI_", "PMIX_")):
            del env[k]
    env.update(PYTHON=sys.executable, PARSIM_JOBS_DIR=str(REPO / "jobs"),
               NUMBA_CACHE_DIR=os.path.abspath(os.environ.get("NUMBA_CACHE_DIR",
                                                              REPO / ".numba_cache")),
               PATH=f"{BIN}:{env.get('PATH', '')}", CHECKPOINT_EVERY="200")
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted serial run."""
    from parsim import warmup

    warmup.compile_kernels()          # the ranks below only load kernels
    d = tmp_path_factory.mktemp("ref")
    (d / "job.toml").write_text(CONFIG)
    assert run_config(str(d / "job.toml"), str(d / "out"), stream=open(os.devnull, "w")) == 0
    return d / "out"


def rank_pids(marker: str) -> list[int]:
    """Python processes (the ranks, not the launcher) whose command line contains marker."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"python" in Path(argv[0].decode(errors="replace")).name.encode() and \
                marker.encode() in b" ".join(argv) and b"parsim" in b" ".join(argv):
            pids.append(int(p.name))
    return pids


def wait_for(pred, timeout=300, what="condition"):
    t0 = time.time()
    while not pred():
        if time.time() - t0 > timeout:
            raise TimeoutError(what)
        time.sleep(0.1)


@pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpiexec next to the interpreter")
def test_production_script_with_stand_in_launcher(reference, tmp_path):
    cfg = tmp_path / "job.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "out"
    record = tmp_path / "submitted.txt"
    submit = tmp_path / "fake_sbatch"
    submit.write_text(f'#!/bin/bash\necho "$@" >> {record}\n')
    submit.chmod(0o755)
    env = env_for(tmp_path, PARSIM_LAUNCH=f"{MPIEXEC} -n 2", PARSIM_SUBMIT=str(submit),
                  CONFIG=str(cfg), OUTDIR=str(out))
    proc = subprocess.Popen(["bash", str(REPO / "jobs" / "production.sbatch")], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:                 # the ranks are stepping: the wall time "comes"
        lines.append(line)
        if line.startswith("step"):
            break
    pids = rank_pids(str(cfg))
    assert len(pids) == 2, (pids, lines)
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
    rest, _ = proc.communicate(timeout=300)
    log = "".join(lines) + rest
    assert proc.returncode == 0, log
    status = (out / "status").read_text().split()
    assert status[0] == "interrupted", log
    assert "status interrupted" in log
    sub = record.read_text()
    assert "--dependency=afterany:0" in sub and "PARSIM_RESUBMIT_COUNT=1" in sub
    assert sub.strip().endswith("jobs/production.sbatch")
    # the resubmitted job: restarts from the newest checkpoint and completes
    env["PARSIM_RESUBMIT_COUNT"] = "1"
    r = subprocess.run(["bash", str(REPO / "jobs" / "production.sbatch")], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "restarting from" in r.stdout
    assert (out / "status").read_text().strip() == "done"
    a, b = open_run(reference).snapshot(-1), open_run(out).snapshot(-1)
    assert int(b["step"]) == 2000
    assert [k for k in STATE if not np.array_equal(a[k], b[k])] == []
    assert record.read_text() == sub         # no second resubmission


def _interrupted_job(tmp_path, submit_body: str, **slurm):
    """production.sbatch in a stand-in job whose run ends "interrupted" at once (a stand-in
    launcher writes the status file; no simulation runs), with a stand-in squeue that reports
    a time limit and a stand-in sbatch (``submit_body``; its arguments are in ``args.txt``, one
    a line). Returns (the script's completed process, the arguments of the follow-up sbatch)."""
    out = tmp_path / "out"
    out.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "args.txt"
    for name, body in (("launch", f'echo "interrupted 100" > "{out}/status"'),
                       ("squeue", 'echo "  1-00:00:00"'),
                       ("sbatch", f'printf "%s\\n" "$@" > "{record}"\n{submit_body}')):
        (bindir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bindir / name).chmod(0o755)
    env = env_for(tmp_path, PARSIM_LAUNCH=str(bindir / "launch"),
                  PARSIM_SUBMIT=str(bindir / "sbatch"), CONFIG=str(tmp_path / "job.toml"),
                  OUTDIR=str(out), SLURM_SUBMIT_DIR=str(tmp_path), **slurm)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    r = subprocess.run(["bash", str(REPO / "jobs" / "production.sbatch")], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    return r, (record.read_text().splitlines() if record.exists() else None)


def test_resubmission_keeps_the_jobs_options(tmp_path):
    """The follow-up job asks for the account, partition, QOS, nodes, tasks, memory, name and
    time limit of the job (only --ntasks was passed on: a cluster requiring --account rejected
    the follow-up), then PARSIM_SBATCH_ARGS."""
    r, args = _interrupted_job(
        tmp_path, "echo 'Submitted batch job 4243'", SLURM_JOB_ID="4242",
        SLURM_JOB_ACCOUNT="proj42", SLURM_JOB_PARTITION="long", SLURM_JOB_QOS="high",
        SLURM_JOB_NUM_NODES="2", SLURM_NTASKS="8", SLURM_NTASKS_PER_NODE="4",
        SLURM_MEM_PER_NODE="4000", SLURM_MEM_PER_CPU="500", SLURM_JOB_NAME="bed",
        PARSIM_SBATCH_ARGS="--output=bed-%j.out --constraint=skylake")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "status interrupted" in r.stdout and "Submitted batch job 4243" in r.stdout
    out = tmp_path / "out"
    assert args == [
        "--dependency=afterany:4242", "--account=proj42", "--partition=long", "--qos=high",
        "--nodes=2", "--ntasks=8", "--ntasks-per-node=4", "--mem=4000", "--job-name=bed",
        "--time=1-00:00:00",
        f"--export=ALL,PARSIM_RESUBMIT_COUNT=1,CONFIG={tmp_path / 'job.toml'},OUTDIR={out}",
        "--output=bed-%j.out", "--constraint=skylake",
        str(REPO / "jobs" / "production.sbatch")]


def test_failed_resubmission_fails_the_job(tmp_path):
    """A follow-up sbatch that fails: its error is in the log and the job exits 1 (it exited
    0, so the chain ended silently with the job COMPLETED)."""
    r, args = _interrupted_job(
        tmp_path, "echo 'sbatch: error: Batch job submission failed: Invalid account or "
        "account/partition combination specified' >&2\nexit 1", SLURM_JOB_ID="4242",
        SLURM_NTASKS="2")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Invalid account or account/partition combination" in r.stdout
    assert "the resubmission failed (exit status 1" in r.stdout
    assert args[:3] == ["--dependency=afterany:4242", "--ntasks=2", "--time=1-00:00:00"]


@pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpiexec next to the interpreter")
def test_sweep_script_task(tmp_path):
    env = env_for(tmp_path, PARSIM_LAUNCH=f"{MPIEXEC} -n 2", SLURM_ARRAY_TASK_ID="1",
                  SWEEP_VALUES="0.3 0.7", STEPS="100", OUTROOT=str(tmp_path / "sweep"))
    r = subprocess.run(["bash", str(REPO / "jobs" / "sweep.sbatch")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    d = tmp_path / "sweep" / "friction_0.7"
    assert "friction = 0.7" in (d / "config.toml").read_text()
    assert (d / "status").read_text().strip() == "done"
    assert open_run(d).snapshot(-1)["step"] == 100
    env["SLURM_ARRAY_TASK_ID"] = "5"
    r = subprocess.run(["bash", str(REPO / "jobs" / "sweep.sbatch")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "task 5 has no value" in r.stdout


# ---- a real single-node SLURM -------------------------------------------------------------------

SLURM_BINS = ("slurmctld", "slurmd", "munged", "sbatch", "scancel", "squeue")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def slurm(tmp_path):
    """slurmctld + slurmd (+ munged) on this machine, with a private config; stopped after."""
    missing = [b for b in SLURM_BINS if not (shutil.which(b) or Path("/usr/sbin", b).exists())]
    if missing:
        extras.missing(f"SLURM not installed ({', '.join(missing)} missing): apt-get install "
                       "slurm-wlm munge (.ci/run does)")
    if os.geteuid() != 0:
        extras.missing("starting slurmd needs root")
    d = tmp_path / "slurm"
    (d / "state").mkdir(parents=True)
    (d / "spool").mkdir()
    host = socket.gethostname()
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=parsimtest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    sbin = lambda b: shutil.which(b) or f"/usr/sbin/{b}"  # noqa: E731
    if subprocess.run(["munge", "-n"], capture_output=True).returncode != 0:
        if not Path("/etc/munge/munge.key").exists():
            subprocess.run(["mungekey", "--create"], check=False)
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run([sbin("munged"), "--force"], check=True)
    started = []
    try:
        for daemon in ("slurmctld", "slurmd"):
            r = subprocess.run([sbin(daemon), "-f", str(conf)], env=env, capture_output=True,
                               text=True)
            assert r.returncode == 0, f"{daemon} did not start: {r.stderr}"
            started.append(d / f"{daemon}.pid")
        wait_for(lambda: "idle" in subprocess.run(["sinfo", "-h"], env=env, capture_output=True,
                                                  text=True).stdout, 60, "slurm node idle")
        yield env
    finally:
        for pidfile in started:
            try:
                os.kill(int(pidfile.read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass


def test_production_script_under_real_slurm(reference, tmp_path, slurm):
    cfg = tmp_path / "job.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "out"
    env = env_for(tmp_path, CONFIG=str(cfg), OUTDIR=str(out))
    env["SLURM_CONF"] = slurm["SLURM_CONF"]
    env.pop("PARSIM_LAUNCH", None)
    env.pop("PARSIM_SUBMIT", None)
    r = subprocess.run(["sbatch", "--parsable", "--ntasks=2",
                        str(REPO / "jobs" / "production.sbatch")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    log = tmp_path / f"parsim-{job}.out"
    wait_for(lambda: log.exists() and "\nstep" in log.read_text(), 300, "first progress line")
    subprocess.run(["scancel", "--signal=USR1", job], env=env, check=True)

    def queue():
        return subprocess.run(["squeue", "-h", "-o", "%i %T"], env=env, capture_output=True,
                              text=True).stdout.split()

    wait_for(lambda: (out / "status").exists() and
             (out / "status").read_text().startswith("done") and not queue(), 600,
             "the resubmitted job to finish")
    logs = sorted(tmp_path.glob("parsim-*.out"))
    assert len(logs) == 2, [p.name for p in logs]          # the job and its resubmission
    text = "".join(p.read_text() for p in logs)
    assert "status interrupted" in text and "restarting from" in text and "status done" in text
    # the follow-up asked for the job's partition, node count and time limit (squeue's)
    assert "--partition=debug --nodes=1 --ntasks=2" in text and "--time=1-00:00:00" in text
    a, b = open_run(reference).snapshot(-1), open_run(out).snapshot(-1)
    assert [k for k in STATE if not np.array_equal(a[k], b[k])] == []


def test_latest_checkpoint_skips_a_damaged_newest_one(tmp_path):
    """lib.sh restarts from the newest checkpoint that `parsim info` accepts: with the newest
    one's part file truncated, the one before it."""
    from parsim.checkpoint import part_path

    cfg = tmp_path / "job.toml"
    cfg.write_text(CONFIG.replace("steps = 2000", "steps = 40").replace("count = 500",
                                                                        "count = 50"))
    out = tmp_path / "out"
    assert run_config(str(cfg), str(out), stream=open(os.devnull, "w"), checkpoint_every=20) == 0

    def latest() -> str:
        r = subprocess.run(["bash", "-c", f'source {REPO / "jobs" / "lib.sh"}; '
                            f'parsim_latest_checkpoint "{out}"'], cwd=tmp_path,
                           env=env_for(tmp_path), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    first, last = sorted((out / "checkpoints").glob("checkpoint_*.h5"))
    assert latest() == str(last)
    p = part_path(last, 0)
    p.write_bytes(p.read_bytes()[:500])
    assert latest() == str(first)
