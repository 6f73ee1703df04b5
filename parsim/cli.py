"""The ``parsim`` command line (also ``python -m parsim``).

Subcommands:

* ``run CONFIG [--output DIR] [--steps N] [--checkpoint-every K] [--overwrite]`` -- run a TOML configuration (:mod:`parsim.runner`);
* ``restart CHECKPOINT [--output DIR] [--steps N]`` -- continue from a checkpoint up to step N;
* ``info FILE`` -- what a snapshot file, checkpoint or run directory holds;
* ``demo`` -- the slab-decomposed broad-phase demo (:mod:`parsim.demo`).

Under MPI, launch through mpi4py so that an exception on one rank aborts the whole job::

    mpiexec -n 4 python -m mpi4py -m parsim demo
"""

from __future__ import annotations

import argparse

from . import __version__


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="parsim",
        description="MPI-parallel, domain-decomposed rigid-body (DEM) simulator.",
        epilog="Under MPI: mpiexec -n N python -m mpi4py -m parsim COMMAND ...",
    )
    parser.add_argument("--version", action="version", version=f"parsim {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run", help="run a simulation described by a TOML config",
        description="Build the bodies of CONFIG, step them, write HDF5 snapshots to "
        "DIR/snapshots.h5 (layout: docs/output.md) and print progress lines.")
    run.add_argument("config", metavar="CONFIG", help="TOML configuration (see configs/)")
    run.add_argument("--output", metavar="DIR", default=None,
                     help="output directory (default: output/<config name>)")
    run.add_argument("--steps", type=_non_negative_int, default=None, metavar="N",
                     help="number of steps (default: [simulation] steps of the config)")
    run.add_argument("--checkpoint-every", type=_non_negative_int, default=None, metavar="K",
                     help="write a checkpoint every K steps and at the end (default: [output] "
                     "checkpoint_every of the config; 0: none)")
    run.add_argument("--overwrite", action="store_true",
                     help="replace an earlier run in DIR (its snapshots, checkpoints and status; "
                     "without this flag such a DIR is refused)")
    run.set_defaults(handler=_run)

    rs = commands.add_parser(
        "restart", help="continue a run from a checkpoint",
        description="Continue from CHECKPOINT (any number of ranks) up to step N in total; "
        "snapshots are appended to DIR/snapshots.h5 (later ones are replaced).")
    rs.add_argument("checkpoint", metavar="CHECKPOINT", help="DIR/checkpoints/checkpoint_*.h5")
    rs.add_argument("--output", metavar="DIR", default=None,
                    help="output directory (default: the run directory of the checkpoint)")
    rs.add_argument("--steps", type=_non_negative_int, default=None, metavar="N",
                    help="total step count to reach (default: that of the run that wrote the "
                    "checkpoint: its --steps, else [simulation] steps of its config)")
    rs.add_argument("--checkpoint-every", type=_non_negative_int, default=None, metavar="K",
                    help="as for run (default: the interval of the run that wrote the "
                    "checkpoint)")
    rs.set_defaults(handler=_restart)

    info = commands.add_parser(
        "info", help="what a parsim file or run directory holds",
        description="Print the format version, steps, bodies, timings and config of a "
        "snapshot file, a checkpoint or a run directory.")
    info.add_argument("file", metavar="FILE")
    info.set_defaults(handler=_info)

    demo = commands.add_parser(
        "demo",
        help="broad-phase demo: random-walking bodies on slab-decomposed ranks",
        description="Bodies random-walk in a box cut into one slab per rank; every step the "
        "ranks migrate bodies, exchange shadow copies, update their broad-phase structure and "
        "count overlapping AABB pairs. Rank 0 prints a per-step table. The global pair count "
        "does not depend on the number of ranks.",
    )
    demo.add_argument("--bodies-per-rank", type=_positive_int, default=20_000, metavar="N",
                      help="bodies per rank; the run has N * ranks bodies (default: %(default)s)")
    demo.add_argument("--steps", type=_non_negative_int, default=50, metavar="S",
                      help="random-walk steps after the initial placement (default: %(default)s)")
    demo.add_argument("--structure", default="HierarchicalHashGrid", metavar="NAME",
                      help="broad-phase class in parsim.broadphase, e.g. HierarchicalHashGrid "
                      "or BruteForce (default: %(default)s)")
    demo.add_argument("--seed", type=_non_negative_int, default=0,
                      help="seed of the random numbers (default: %(default)s)")
    demo.set_defaults(handler=_demo)
    return parser


def _run(args: argparse.Namespace) -> int:
    from .runner import run_config

    return run_config(args.config, args.output, args.steps,
                      checkpoint_every=args.checkpoint_every, overwrite=args.overwrite)


def _restart(args: argparse.Namespace) -> int:
    from .runner import restart

    return restart(args.checkpoint, args.output, args.steps,
                   checkpoint_every=args.checkpoint_every)


def _info(args: argparse.Namespace) -> int:
    import sys

    from .io import describe

    try:
        text = describe(args.file)
    except ValueError as e:            # OutputError, CheckpointError
        print(f"parsim info: {e}", file=sys.stderr)
        return 2
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # the reader stopped early (`parsim info FILE | head`): not an error of ours; point
        # stdout at /dev/null so that the interpreter's final flush does not raise again
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import demo_command  # imports mpi4py: only when the command runs

    return demo_command(args.bodies_per_rank, args.steps, args.structure, args.seed)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return its exit status."""
    args = build_parser().parse_args(argv)
    return args.handler(args)
