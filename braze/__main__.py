import sys

from braze.cli import main

sys.exit(main())
