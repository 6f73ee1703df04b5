"""``python -m parsim``: the command line of :mod:`parsim.cli`."""

import sys

from parsim.cli import main

if __name__ == "__main__":
    sys.exit(main())
