"""The fusion suite (braze/cli/bench/suite.py, also `braze bench`), writing to benchmarks/results/.

    python benchmarks/suite.py [--quick] [--cases a,b] [--out PATH]    # the GPU suite
    python benchmarks/suite.py --cpu [--quick] [--cases a,b]           # the llvm backend against NumPy
"""

import sys
from pathlib import Path

from braze.cli.bench.suite import main

if __name__ == "__main__":
    sys.exit(main(results=Path(__file__).parent / "results"))
