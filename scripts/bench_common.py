"""Shared helpers for the parsim benchmark scripts (machine info, worker processes, tables).

Nothing here imports parsim: the benchmark scripts decide what to import and when.

The worker machinery exists so that a benchmark can give every candidate a time and memory
budget: each candidate runs in its own forked process, the parent sends it one small command at
a time (set up a case, do one step, ...) and waits with a deadline. A candidate that exceeds its
budget or memory limit is killed and reported as "timeout" / "memory" instead of hanging the run;
one that crashes (segfault in compiled code) is reported as "crashed". Because the parent sends
commands to the candidates in turn, their repetitions are interleaved in time, which spreads the
noise of a shared machine evenly over them.
"""

from __future__ import annotations

import datetime as _dt
import json
import multiprocessing as _mp
import os
import platform
import subprocess
import sys
import time
import traceback

import numpy as np

GiB = 1024 ** 3


# --------------------------------------------------------------------------------------------
# machine / software description
# --------------------------------------------------------------------------------------------

def _run(cmd: list[str], cwd: str | None = None) -> str:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001 - informational only
        return ""


def run_command() -> str:
    """The command line of this benchmark run as the reports state it: the script under
    ``scripts/`` with this run's arguments, after the project's numba cache setting."""
    import shlex

    args = " ".join(shlex.quote(x) for x in sys.argv[1:])
    return (f"NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/"
            f"{os.path.basename(sys.argv[0])} {args}").strip()


def use_repo(repo) -> None:
    """Make ``import parsim`` load the tree this script lives in (``repo``), not whichever copy
    is installed in the environment (an editable install points at one checkout only): a
    benchmark run from a second worktree must measure that worktree. An explicit PYTHONPATH
    wins (bench_scaling points its workers at a frozen copy that way)."""
    if not os.environ.get("PYTHONPATH") and str(repo) not in sys.path:
        sys.path.insert(0, str(repo))


def parsim_location() -> str:
    """Directory of the parsim package the benchmark imported (recorded with the results)."""
    import importlib.util
    spec = importlib.util.find_spec("parsim")
    return os.path.dirname(spec.origin) if spec and spec.origin else "not importable"


_COMPILED: set[tuple[str, str]] = set()


def compile_first(py, env: dict, ranks: int) -> None:
    """Before a script's first job of several ranks: compile parsim's kernels on one process
    (once per interpreter and numba cache): one compile instead of one per rank, and no
    compiling inside a timed run (``parsim run`` and scripts/run_tests.sh compile first too).
    With a warm cache this only loads them (~2 s)."""
    key = (str(py), env.get("NUMBA_CACHE_DIR", ""))
    if ranks < 2 or key in _COMPILED:
        return
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import os, sys\n"                   # the tree the workers load (see use_repo)
            f"if not os.environ.get('PYTHONPATH'): sys.path.insert(0, {repo!r})\n"
            "from parsim import warmup\nwarmup.compile_kernels()")
    r = subprocess.run([str(py), "-c", code], env=env, capture_output=True, text=True,
                       timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"compiling parsim's kernels failed ({r.returncode}):\n"
                           f"{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    _COMPILED.add(key)


def machine_info(repo: str | None = None) -> dict:
    """CPU model and cores (lscpu), memory, OS, library versions, date, git state."""
    lscpu = _run(["lscpu"])
    fields = {}
    for line in lscpu.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) * 1024 / GiB, 1)
    except OSError:
        pass
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    for mod in ("numba", "scipy", "matplotlib"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            versions[mod] = "not installed"
    info = {
        "cpu_model": fields.get("Model name", platform.processor() or "unknown"),
        "cpus": fields.get("CPU(s)", str(os.cpu_count())),
        "threads_per_core": fields.get("Thread(s) per core", "?"),
        "mem_gib": mem_gib,
        "os": f"{platform.system()} {platform.release()}",
        "versions": versions,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_start": os.getloadavg(),
        "parsim_imported_from": parsim_location(),
        # the MPICH settings parsim.comm sets at import unless given (parsim.comm.MPICH_DEFAULTS;
        # unset here: parsim's default, the queue cells chosen by the ranks themselves)
        "env": {k: os.environ.get(k) for k in ("NUMBA_CACHE_DIR", "NUMBA_NUM_THREADS",
                                               "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                               "MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD",
                                               "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE",
                                               "MPIR_CVAR_CH4_PACK_BUFFER_SIZE")},
    }
    if repo:
        info["git_head"] = _run(["git", "rev-parse", "--short", "HEAD"], cwd=repo)
        info["git_status_parsim"] = _run(["git", "status", "--porcelain", "--", "parsim"], cwd=repo)
    return info


# --------------------------------------------------------------------------------------------
# pair-set fingerprint
# --------------------------------------------------------------------------------------------

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
_M3 = np.uint64(0x165667B19E3779F9)


def pair_fingerprint(p: np.ndarray) -> tuple[int, int, bool]:
    """(count, order-independent 64-bit hash of the unordered pairs, rows all have a < b).

    Two pair lists with equal count and hash are the same set (up to a 2^-64 accident), so
    structures can be checked against each other without sorting millions of rows.
    """
    p = np.asarray(p)
    if p.size == 0:
        return 0, 0, True
    a = p[:, 0].astype(np.int64)
    b = p[:, 1].astype(np.int64)
    ordered = bool((a < b).all())
    lo = np.minimum(a, b).astype(np.uint64)
    hi = np.maximum(a, b).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = (lo * _M1) ^ (hi * _M2)
        h ^= h >> np.uint64(29)
        h *= _M3
        h ^= h >> np.uint64(32)
        s = int(h.sum(dtype=np.uint64))
    return int(p.shape[0]), s, ordered


# --------------------------------------------------------------------------------------------
# worker processes with deadlines
# --------------------------------------------------------------------------------------------

def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _worker_entry(conn, handler_factory, args):
    handler = handler_factory(*args)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "quit":
            return
        try:
            res = handler(msg)
            conn.send(("ok", res))
        except Exception as e:  # noqa: BLE001 - reported to the parent, the worker lives on
            conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))


class Worker:
    """A forked process running ``handler_factory(*args)(msg)`` for each message sent.

    ``call(msg, timeout)`` returns ``(status, payload)`` with status one of ``ok``, ``error``
    (payload: message, traceback), ``timeout``, ``memory`` or ``crashed``; after anything but
    ``ok``/``error`` the process is gone and the next ``call`` starts a fresh one.
    """

    _ctx = _mp.get_context("fork")

    def __init__(self, handler_factory, args=(), mem_limit: float = 6 * GiB, poll: float = 0.05):
        self.factory = handler_factory
        self.args = args
        self.mem_limit = mem_limit
        self.poll = poll
        self.proc = None
        self.conn = None
        self.peak_rss = 0

    def start(self):
        parent, child = self._ctx.Pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        self.proc = self._ctx.Process(target=_worker_entry, args=(child, self.factory, self.args),
                                      daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def call(self, msg, timeout: float):
        if not self.alive:
            self.start()
        t0 = time.perf_counter()
        self.conn.send(msg)
        pid = self.proc.pid
        while True:
            if self.conn.poll(self.poll):
                try:
                    out = self.conn.recv()
                except EOFError:
                    return self._dead("crashed")
                if out[0] == "ok":
                    return "ok", out[1]
                return "error", (out[1], out[2])
            if not self.proc.is_alive():
                code = self.proc.exitcode
                return self._dead("crashed", f"exit code {code}")
            rss = rss_bytes(pid)
            self.peak_rss = max(self.peak_rss, rss)
            if rss > self.mem_limit:
                return self._dead("memory", f"RSS {rss / GiB:.1f} GiB > {self.mem_limit / GiB:.1f} GiB")
            if time.perf_counter() - t0 > timeout:
                return self._dead("timeout", f"> {timeout:.3g} s")

    def _dead(self, status, detail=""):
        self.kill()
        return status, detail

    def kill(self):
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = None
        self.conn = None

    def close(self):
        if self.alive:
            try:
                self.conn.send(("quit",))
                self.proc.join(5)
            except (OSError, BrokenPipeError):
                pass
        self.kill()


# --------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------

def fmt_time(s) -> str:
    """Seconds as a short human string (ns / us / ms / s)."""
    if s is None:
        return "-"
    if isinstance(s, str):
        return s
    if s != s:  # nan
        return "-"
    a = abs(s)
    if a < 1e-6:
        return f"{s * 1e9:.0f} ns"
    if a < 1e-3:
        return f"{s * 1e6:.1f} us"
    if a < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def fmt_num(x, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    if x != x:
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 1e4 or abs(x) < 1e-2:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def write_report(out, stem: str, title: str, intro: str, command: str, info: dict,
                 heads: list[str], rows: list[list[str]], data: dict) -> None:
    """``<out>/<stem>.json`` (``info``, ``command`` and ``data``) and ``<out>/<stem>.md``:
    title, intro, the command, the machine and one table."""
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps({"info": info, "command": command, **data},
                                                 indent=1, default=str))
    md = [f"# {title}", "", intro, "", f"Command: `{command}`", "",
          "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("git_diff",)),
          "", md_table(heads, rows), ""]
    (out / f"{stem}.md").write_text("\n".join(md) + "\n")


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or None (and a hint printed) when matplotlib
    is not installed."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib missing: no plot (pip install -e '.[bench]')")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def text_table(headers: list[str], rows: list[list[str]], title: str | None = None) -> str:
    cols = [headers] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cols) for i in range(len(headers))]
    out = []
    if title:
        out.append(title)
    out.append("  ".join(h.ljust(w[i]) for i, h in enumerate(headers)))
    out.append("  ".join("-" * w[i] for i in range(len(headers))))
    for r in cols[1:]:
        out.append("  ".join(c.ljust(w[i]) for i, c in enumerate(r)))
    return "\n".join(out)


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    def esc(c):
        return str(c).replace("|", "\\|")
    out = ["| " + " | ".join(esc(h) for h in headers) + " |",
           "| " + " | ".join("---" for _ in headers) + " |"]
    for r in rows:
        out.append("| " + " | ".join(esc(c) for c in r) + " |")
    return "\n".join(out)
