"""`python hack/fleetbox up|status|down` (what `make fleet` and `make fleet-down` run):
the fleet box's command line, cli.py."""

import sys
from pathlib import Path

if not __package__:
    # Run as a folder, Python put this folder first on sys.path, where its modules would
    # import a second time under top-level names; the package's parent belongs there.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fleetbox.cli import main

sys.exit(main())
