"""The ``parsim`` command line (also ``python -m parsim``).

Subcommands:

* ``demo`` -- the slab-decomposed broad-phase demo (:mod:`parsim.demo`).

``run``, ``restart`` and ``info`` will be added with the engine, the configuration files and the
checkpoints; they are not registered yet.

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


def _demo(args: argparse.Namespace) -> int:
    from .demo import demo_command  # imports mpi4py: only when the command runs

    return demo_command(args.bodies_per_rank, args.steps, args.structure, args.seed)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand, return its exit status."""
    args = build_parser().parse_args(argv)
    return args.handler(args)
