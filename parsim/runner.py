"""``parsim run CONFIG``: build the simulation from a TOML config, step it, write snapshots.

Runs on any number of ranks (``mpiexec -n N python -m mpi4py -m parsim run CONFIG``); every rank
reads the config and makes the same calls, and the results do not depend on N.

Progress lines (rank 0) every ``[output] progress_every`` steps: step, simulated time, steps/s,
bodies, contacts, ETA. On a :class:`parsim.SimulationError` (non-finite state, outflow) the
current state is written as a snapshot with status "failed" before the error is reported.

``parsim restart CHECKPOINT`` continues a run from a checkpoint (:mod:`parsim.checkpoint`);
checkpoints are written every ``[output] checkpoint_every`` steps (or ``--checkpoint-every``),
the newest ``keep_checkpoints`` kept; a checkpoint stores its run's step target and interval,
the defaults of a restart. SIGTERM or SIGUSR1 make all ranks stop within
:data:`SIGNAL_POLL` steps (at the next step where they check), write a snapshot and a checkpoint
and stop (a signal during the setup too: the handlers are installed first); ``DIR/status`` then says ``interrupted <step>`` (``done``
after a complete run, ``failed <step>`` after an error).
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from pathlib import Path

from .compile_watch import watch
from .config import ConfigError, load, pour
from .output_shared import open_writer
from .simulation import OverlapWarning, SimulationError


def _say(sim, text: str, stream) -> None:
    if sim is None or sim.net.rank == 0:
        print(text, file=stream, flush=True)


def timings(sim, extra: dict | None = None) -> dict:
    """Per-phase seconds over the ranks: name -> (min, mean, max) (collective)."""
    phases = dict(sim.timers)
    for k, v in sim.halo.timers.items():
        phases[f"refresh {k}"] = v
    phases.update(extra or {})
    rows = sim.net.allgather(phases)
    return {k: (min(r[k] for r in rows), sum(r[k] for r in rows) / len(rows),
                max(r[k] for r in rows)) for k in phases}


def timing_table(table: dict) -> str:
    lines = [f"{'phase':<22s} {'min [s]':>9s} {'mean [s]':>9s} {'max [s]':>9s}"]
    for k, (lo, mean, hi) in table.items():
        lines.append(f"{k:<22s} {lo:9.2f} {mean:9.2f} {hi:9.2f}")
    return "\n".join(lines)


def _prepare_ranks(net) -> None:
    """On several ranks one numba thread per rank (unless NUMBA_NUM_THREADS says otherwise).
    The kernels are compiled (or loaded) first by rank 0, helped by rank 1 where that has a
    core of its own (:func:`_rank1_helps`), before the others load them (one compile instead of
    one per rank; the cache itself is safe to share, see :mod:`parsim.numba_cache`), with a
    note when that takes long. A run's timings leave this out; a kernel compiled later, while
    the run steps, is counted apart (:mod:`parsim.compile_watch`)."""
    import os

    import numba

    from . import warmup

    if net.size > 1 and "NUMBA_NUM_THREADS" not in os.environ:
        numba.set_num_threads(1)
    helps = _rank1_helps(net)
    if net.rank == 0:
        import threading

        # a cold cache means a minute or more of compiling: say so rather than stay silent
        t0 = time.perf_counter()
        said = threading.Event()
        note = threading.Timer(COMPILE_NOTE_AFTER, lambda: (_compile_note(), said.set()))
        note.daemon = True
        note.start()
        try:
            warmup.compile_kernels()
        finally:
            note.cancel()
            note.join()
        if said.is_set():
            print(f"parsim: kernels ready after {time.perf_counter() - t0:.0f} s", flush=True)
    elif helps:
        warmup.compile_helper_part()
    net.quiet_barrier()     # asleep, not polling: the compiling ranks keep their cores


def _rank1_helps(net) -> bool:
    """True on rank 1 (only) when it is to compile :func:`parsim.warmup.compile_helper_part`
    while rank 0 compiles the rest: when it runs on another host than rank 0, or when the two
    may run on different CPUs (their affinity masks together hold at least two; on one core
    it would only slow rank 0 down). Collective: rank 0 broadcasts its host and mask."""
    import os
    import socket

    if net.size < 2:
        return False
    try:
        mine = (socket.gethostname(), frozenset(os.sched_getaffinity(0)))
    except (AttributeError, OSError):           # no affinity masks here (not Linux)
        mine = (socket.gethostname(), frozenset(range(os.cpu_count() or 1)))
    host0, cpus0 = net.bcast(mine if net.rank == 0 else None)
    if net.rank != 1:
        return False
    return mine[0] != host0 or len(cpus0 | mine[1]) >= 2


#: seconds of loading kernels after which the run says that it is compiling them
COMPILE_NOTE_AFTER = 5.0


def _compile_note() -> None:
    import numba

    where = numba.config.CACHE_DIR or "__pycache__ next to parsim's sources"
    print("parsim: compiling the numba kernels (the first run after installing or editing "
          f"parsim takes one to three minutes; they are kept in {where} for the next runs)",
          flush=True)


class _Signals:
    """SIGTERM / SIGUSR1 (SLURM's warning before the wall time with ``--signal``) and SIGINT
    (Ctrl-C; a second one raises KeyboardInterrupt) set a flag;
    the ranks agree on it every :data:`SIGNAL_POLL` steps and at every snapshot, checkpoint
    and progress line (one reduction) and stop cleanly together."""

    def __init__(self):
        import signal

        self.caught = 0
        self._old = {}
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handler)
            except (ValueError, OSError):        # not the main thread
                pass

    def _handler(self, signum, frame):
        import signal

        if signum == signal.SIGINT and self.caught == signal.SIGINT:
            raise KeyboardInterrupt       # Ctrl-C twice: stop now, without a checkpoint
        if signum == signal.SIGINT:
            print("parsim: Ctrl-C: stopping at the next signal check with a checkpoint "
                  "(press it again to stop at once, without one)", file=sys.stderr, flush=True)
        self.caught = int(signum)

    def restore(self):
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Bar:
    """A live one-line progress bar on a terminal (rank 0; batch jobs get log lines only)."""

    def __init__(self, stream, first: int, target: int):
        self.stream, self.first, self.target = stream, first, target
        self.t0 = self.last = time.perf_counter()
        self.shown = False

    def update(self, step: int) -> None:
        now = time.perf_counter()
        if now - self.last < 0.2:
            return
        self.last = now
        done = (step - self.first) / max(self.target - self.first, 1)
        rate = (step - self.first) / max(now - self.t0, 1e-9)
        eta = (self.target - step) / rate if rate > 0 else float("inf")
        width = 30
        fill = int(width * done)
        self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {100 * done:5.1f} %  step "
                          f"{step}/{self.target}  {rate:8.1f} steps/s  ETA {eta:7.1f} s ")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()
            self.shown = False


def _write_status(out: Path, net, text: str) -> None:
    """DIR/status: "done", "interrupted <step>" or "failed <step>", for job scripts (the exit
    code of an MPI job is not reliable: ``-m mpi4py`` turns errors into aborts)."""
    if net.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / "status.tmp"
        tmp.write_text(text + "\n")
        tmp.replace(out / "status")


def _checkpoint(sim, cfg, out: Path, keep: int, target: int, every: int):
    from . import checkpoint

    path = out / "checkpoints" / f"checkpoint_{sim.step_count:010d}.h5"
    checkpoint.write(sim, path, cfg.text, cfg.path, cfg.rains,
                     run={"target_steps": target, "checkpoint_every": every})
    if sim.net.rank == 0:
        checkpoint.prune(out, keep)
    return path


#: steps between two checks for a caught signal (one reduction over the ranks each time): a
#: stop request is served within this many steps
SIGNAL_POLL = 50


def _stretch(step: int, target: int, cfg, checkpoint_every: int) -> int:
    """Steps from ``step`` to the next step where the driver has something to do (snapshot,
    checkpoint, progress line, rain, signal check, end). ``Simulation.run`` steps through a
    stretch without stopping, which lets it join a step's second half to the next one's first
    half (:meth:`parsim.Simulation._advance`)."""
    ends = [target, step + SIGNAL_POLL]
    for every in (cfg.output_every, cfg.progress_every, checkpoint_every,
                  *(r.every for r in cfg.rains if r.remaining)):
        if every:
            ends.append((step // every + 1) * every)
    return min(ends) - step


def _drive(net, cfg, out: Path, target: int, writer, stream, checkpoint_every: int,
           signals: _Signals) -> int:
    """Step ``cfg.sim`` to step ``target`` with snapshots, checkpoints, progress and signals
    (``signals``: caught since the start, setup included, and served at the first check)."""
    sim = cfg.sim
    t0 = time.perf_counter()
    last_t, last_step = t0, sim.step_count
    first = sim.step_count
    work0 = sim.body_steps
    deleted0 = sim.deleted      # a restart's count runs from step 0 (the checkpoint keeps it)
    keep = cfg.keep_checkpoints
    bar = _Bar(stream, first, target) if net.rank == 0 and _isatty(stream) else None
    watching = contextlib.ExitStack()   # kernels compiled mid-run (threaded builds): noted
    compiles = watching.enter_context(watch(lambda text: print(text, file=stream, flush=True)))
    try:
        while sim.step_count < target:
            for rain in cfg.rains:
                if rain.remaining and sim.step_count % rain.every == 0 and sim.step_count:
                    asked = min(rain.count, rain.remaining)
                    placed = pour(sim, rain)
                    if placed < asked:      # the region is crowded: say so (not made up later)
                        _say(sim, f"rain {rain.spec['where']} at step {sim.step_count}: placed "
                             f"{placed} of {asked} (the region is crowded; the shortfall is not "
                             f"made up later, {rain.remaining} of its total are still to come)",
                             stream)
            sim.run(_stretch(sim.step_count, target, cfg, checkpoint_every))
            s = sim.step_count
            stop = net.max(signals.caught)
            if stop and s == target:         # all steps ran: the run ends as "done"
                _say(sim, f"signal {int(stop)} during the last steps: the run is complete",
                     stream)
                stop = 0
            if s % cfg.output_every == 0 or s == target or stop:
                writer.write(sim)
            if checkpoint_every and (s % checkpoint_every == 0 or s == target) or stop:
                path = _checkpoint(sim, cfg, out, keep, target, checkpoint_every)
                if stop:
                    _say(sim, f"signal {int(stop)}: stopped after step {s}; checkpoint {path}",
                         stream)
                    _write_status(out, net, f"interrupted {s}")
                    return 0
            if bar is not None:
                bar.update(s)
            if s % cfg.progress_every == 0 or s == target:
                if bar is not None:
                    bar.clear()
                now = time.perf_counter()
                rate = (s - last_step) / max(now - last_t, 1e-9)
                eta = (target - s) / rate if rate > 0 else float("inf")
                bodies = _bodies(sim)
                contacts = sim.count_contacts()
                _say(sim, f"step {s:>9d}/{target}  t = {sim.time:.5g} s  {rate:9.1f} steps/s  "
                     f"{bodies}  {contacts} contacts  ETA {eta:7.1f} s", stream)
                last_t, last_step = now, s
    except SimulationError as e:      # raised alike on every rank (the checks are collective)
        writer.write(sim, status="failed")
        writer.close()
        _write_status(out, net, f"failed {sim.step_count}")
        if net.rank == 0:
            print(f"parsim: stopped: {e}\nthe state at the failure is in {writer.path} "
                  f"(step {sim.step_count}, status 'failed')", file=sys.stderr, flush=True)
        return 1
    finally:
        watching.close()
        if bar is not None:
            bar.clear()
    if sim.step_count == first:       # nothing to do: still end with a snapshot
        writer.write(sim)
    wall = net.max(time.perf_counter() - t0)
    compiling = net.max(compiles.seconds)     # a rank that compiled held up the others
    work = net.isum(sim.body_steps - work0)     # bodies present in each step, summed
    deleted = net.isum(sim.deleted - deleted0)
    total = net.isum(sim.deleted)
    extra = {"output": writer.seconds}
    if compiling > 0.0:
        extra["compiling (included)"] = compiles.seconds
    tab = timings(sim, extra)
    writer.write_timings(tab)
    writer.close()
    table = timing_table(tab)
    _write_status(out, net, "done")
    steps = sim.step_count - first
    of = (f" (of which {compiling:.1f} s compiling kernels on their first use: "
          f"{', '.join(k.rsplit('.', 1)[-1] for k in compiles.kernels) or 'on other ranks'})"
          if compiling else "")
    busy = wall - compiling
    _say(sim, f"done: {steps} steps in {wall:.1f} s{of} "
         f"({work / max(busy, 1e-9):.3g} particle-steps/s on {net.size} rank(s)"
         + (", compiling left out" if compiling else "") + "); "
         f"{deleted} bodies deleted by outflow"
         # (until 2026-11-28 a restart's line gave the count since step 0 as if of its steps)
         + (f" ({total} since step 0)" if total != deleted else "")
         + f"; snapshots in {writer.path}\n{table}", stream)
    return 0


def _bodies(sim) -> str:
    """Collective: "N bodies" or "N bodies + P planes" (planes are bodies of the storage and
    of the snapshots' n_bodies, but not what a user counts as particles)."""
    import numpy as np

    from .shapes import PLANE

    st = sim.st
    planes = int(np.count_nonzero(st.shape[: st.n_owned] == PLANE))   # on every rank
    n = sim.count_bodies() - planes
    return f"{n} bodies" + (f" + {planes} plane{'s' if planes > 1 else ''}" if planes else "")


#: what a run writes into its directory (``docs/output.md``)
RUN_FILES = ("snapshots.h5", "snapshots.xmf", "ranks", "checkpoints", "status")


def _claim_output(out: Path, overwrite: bool, way_out: str | None = None) -> str | None:
    """Rank 0: make ``out`` ready for a new run, or say why it cannot be (None if ready). A
    directory holding an earlier run is refused unless ``overwrite``, which removes that run's
    files first (and nothing else). ``way_out``: what the refusal suggests (default: the ways
    out of ``parsim run``)."""
    import shutil

    if out.exists() and not out.is_dir():
        return f"--output {out}: is a file, not a directory; choose another --output"
    found = [name for name in RUN_FILES if (out / name).exists()]
    if found and not overwrite:
        if way_out is None:
            from .checkpoint import checkpoints_in

            cks = checkpoints_in(out)
            way_out = ((f"Continue it with `parsim restart {cks[-1]}` (its newest checkpoint), "
                        if cks else "It has no checkpoint to continue from: ")
                       + "choose another --output, or pass --overwrite to replace it")
        return (f"--output {out}: holds an earlier run ({', '.join(found)}); nothing was "
                f"changed. {way_out}")
    try:
        for name in found:
            p = out / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".parsim-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        return (f"--output {out}: cannot write there ({e.strerror or e}); choose another "
                "--output")
    return None


def _start(net, load_fn, ready=None):
    """(cfg, None) or (None, exit status) after reporting a config error once. ``ready(cfg)``:
    a last check before anything is written (rank 0's message, if any, stops every rank)."""
    _prepare_ranks(net)
    cfg, err = None, None
    try:
        cfg = load_fn()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", OverlapWarning)
            cfg.sim._setup()             # the time-step check and anything else setup refuses
        # the setup's warnings (rank 0's), printed by the caller in the run's own way
        cfg.warnings = [f"parsim: warning: {w.message}" for w in caught
                        if issubclass(w.category, OverlapWarning)]
    except ConfigError as e:
        err = f"parsim: {e}"
    except ValueError as e:            # checkpoint errors
        err = f"parsim: {e}"
    except SimulationError as e:
        err = f"parsim: {cfg.path if cfg is not None else ''}: {e}"
        if "allow_large_dt" in err:
            err += " (in a config: [simulation] allow_large_dt = true)"
    err = net.first_error(err)
    if err is None and ready is not None:
        err = net.first_error(ready(cfg) if net.rank == 0 else None)
    if err is not None:
        if net.rank == 0:
            print(err, file=sys.stderr, flush=True)
        return None, 2
    return cfg, None


#: more global bodies than this (and than 1 % of the bodies) get a warning at the start
GLOBAL_WARNING = 16


def _global_warning(sim) -> str | None:
    """A warning (rank 0's view, the same on every rank) if many finite bodies are global:
    larger than a quarter of the narrowest block, computed by every rank, so the blocks do
    not divide their work."""
    import numpy as np

    from .bodies import GLOBAL
    from .shapes import PLANE

    if sim.net.size == 1:
        return None
    st = sim.st
    no = st.n_owned
    n = int(np.count_nonzero(((st.flags[:no] & GLOBAL) != 0) & (st.shape[:no] != PLANE)))
    total = sim.count_bodies()
    if n <= max(GLOBAL_WARNING, total // 100):
        return None
    return (f"parsim: warning: {n} of {total} bodies are larger than a quarter of the "
            f"narrowest block ({sim.global_radius:.4g}) with blocks {list(sim.dec.dims)}: every "
            "rank computes them all (global bodies), so the ranks do not divide their work. "
            "Use fewer blocks along the cut axes (or fewer ranks)")


def run_config(config: str, output: str | None = None, steps: int | None = None,
               stream=sys.stdout, checkpoint_every: int | None = None,
               overwrite: bool = False) -> int:
    """``parsim run``: build the config's bodies and run ``steps`` steps (default: the config's)
    into ``output`` (default ``output/<config name>``), which must not hold an earlier run
    unless ``overwrite``. Every check comes before anything is written."""
    from .comm import Net, auto_comm

    net = Net(auto_comm())
    signals = _Signals()       # from the start: a signal during a long setup is served too
    try:
        return _run_config(net, signals, config, output, steps, stream, checkpoint_every,
                           overwrite)
    finally:
        signals.restore()


def _run_config(net, signals, config, output, steps, stream, checkpoint_every, overwrite):
    out = Path(output) if output else Path("output") / Path(config).stem
    cfg, status = _start(net, lambda: load(config, steps),
                         lambda cfg: _claim_output(out, overwrite))
    if cfg is None:
        return status
    sim = cfg.sim
    for warning in (*cfg.warnings, _global_warning(sim)):
        if warning and net.rank == 0:
            print(warning, file=sys.stderr, flush=True)
    writer = open_writer(out, cfg.text, cfg.path, sim)
    for note in cfg.notes:
        _say(sim, f"parsim run: {note}", stream)
    _say(sim, f"parsim run {config}: {_bodies(sim)}, {cfg.steps} steps of "
         f"{sim.dt:g} s, {net.size} rank(s) as blocks {list(sim.dec.dims)}, output {writer.path}",
         stream)
    writer.write(sim)
    every = cfg.checkpoint_every if checkpoint_every is None else checkpoint_every
    return _drive(net, cfg, out, cfg.steps, writer, stream, every, signals)


def restart(checkpoint_path: str, output: str | None = None, steps: int | None = None,
            stream=sys.stdout, checkpoint_every: int | None = None) -> int:
    """``parsim restart``: continue from a checkpoint up to step ``steps`` in total (default:
    the step count of the run that wrote it: its ``--steps``, else the config's), on any number
    of ranks, with a checkpoint every ``checkpoint_every`` steps (default: the run's)."""
    import tomllib

    from . import checkpoint
    from .comm import Net, auto_comm
    from .config import build

    net = Net(auto_comm())

    def load_fn():
        data = checkpoint.read(checkpoint_path, bodies=False)   # restore reads the parts it needs
        try:
            raw = tomllib.loads(data["config"])
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{checkpoint_path}: the stored config is not valid TOML: {e}") \
                from None
        src = f"{checkpoint_path}:/config"
        cfg = build(raw, src, data["config"], None, Path(data["config_path"] or ".").parent,
                    restart=True)
        cfg.path = data["config_path"]
        checkpoint.restore(cfg.sim, data, cfg.rains)
        # the interrupted run's own settings (its --steps, --checkpoint-every) are the defaults
        if data["target_steps"] is not None:
            cfg.steps = data["target_steps"]
        if data["checkpoint_every"] is not None:
            cfg.checkpoint_every = data["checkpoint_every"]
        return cfg

    own = Path(checkpoint_path).resolve().parent.parent    # the checkpoint's run directory

    def ready(cfg):
        target = cfg.steps if steps is None else int(steps)
        if target <= cfg.sim.step_count:
            return (f"{checkpoint_path}: the checkpoint is at step {cfg.sim.step_count}, so "
                    f"{'--steps' if steps is not None else 'the step count of its run'} = {target} "
                    "leaves nothing to run (it is the total step count, not the number of "
                    f"steps to add); pass --steps above {cfg.sim.step_count}. Nothing was "
                    "changed")
        if output and Path(output).resolve() != own:   # elsewhere: a directory of its own
            return _claim_output(Path(output), False, "A restart continues in its own run "
                                 f"directory ({own}) by default, or in an empty --output")
        return _own_run_directory(checkpoint_path, own, cfg.text)

    signals = _Signals()       # from the start: a signal during a long setup is served too
    try:
        cfg, status = _start(net, load_fn, ready)
        if cfg is None:
            return status
        return _continue(net, cfg, checkpoint_path, output, steps, stream, checkpoint_every,
                         signals)
    finally:
        signals.restore()


def _own_run_directory(checkpoint_path, own: Path, config_text: str) -> str | None:
    """Rank 0: why a restart must not write into ``own``, the directory two levels above the
    checkpoint, or None. It must be the checkpoint's run: the checkpoint in its
    ``checkpoints/``, and its snapshots (if any) of the same config. Until 2026-11-24 a
    checkpoint copied elsewhere (which the docs allow) restarted into whatever directory lay
    two levels up, and replaced the snapshots of another run there."""
    way_out = ("pass --output DIR: a new directory, or the run directory the checkpoint came "
               "from. Nothing was changed")
    if Path(checkpoint_path).resolve().parent.name != "checkpoints":
        return (f"{checkpoint_path}: not in a run's checkpoints/ directory, so it has no run "
                f"directory to continue in; {way_out}")
    snaps = own / "snapshots.h5"
    if snaps.exists():
        from .io import OutputError, open_run

        try:
            with open_run(own) as run:
                text = run.config
        except (OutputError, OSError, KeyError) as e:
            return f"{snaps}: not a readable parsim snapshot file ({e}); {way_out}"
        if text != config_text:
            return (f"{checkpoint_path}: {snaps} holds another run (its config differs from the "
                    f"checkpoint's); {way_out}")
    return None


def _continue(net, cfg, checkpoint_path, output, steps, stream, checkpoint_every, signals):
    from . import checkpoint

    sim = cfg.sim
    target = cfg.steps if steps is None else int(steps)
    out = Path(output) if output else Path(checkpoint_path).resolve().parent.parent
    # rank 0's view, before open_writer creates the file (another rank looking later would
    # see it and skip the collective write below)
    fresh = net.bcast(not (out / "snapshots.h5").exists() if net.rank == 0 else None)
    writer = open_writer(out, cfg.text, cfg.path, sim, append_after=sim.step_count)
    if net.rank == 0:                 # the replaced future: later snapshots and checkpoints
        checkpoint.drop_after(out, sim.step_count)
    if fresh:                         # a new --output starts with the state it starts from
        writer.write(sim)
    for note in cfg.notes:
        _say(sim, f"parsim restart: {note}", stream)
    _say(sim, f"parsim restart {checkpoint_path}: step {sim.step_count} -> {target}, "
         f"{_bodies(sim)}, {net.size} rank(s) as blocks {list(sim.dec.dims)}, "
         f"output {writer.path}", stream)
    every = cfg.checkpoint_every if checkpoint_every is None else checkpoint_every
    return _drive(net, cfg, out, target, writer, stream, every, signals)
