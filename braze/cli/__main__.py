"""`python -m braze.cli`: the `braze` command."""

import sys

from braze.cli import main

sys.exit(main())
