"""One constant of the CUDA code generator's plans (braze/codegen/cuda_plan.py) set for a run of the
fusion suite, braze alone: the code changes with it, so each value is a process of its own, with a
cache folder of its own.

    BRAZE_CACHE_DIR=/tmp/a python benchmarks/experiments/sweep_codegen.py WARP_ROW_BYTES=128 --cases softmax_backward
    BRAZE_CACHE_DIR=/tmp/b python benchmarks/experiments/sweep_codegen.py WARP_ROW_BYTES=256 --cases softmax_backward

The arguments after the setting go to the suite (braze/cli/bench/suite.py), with `--models --braze-only`
added where no mode is given.
"""

from __future__ import annotations

import sys

from braze.cli.bench.suite import main
from braze.codegen import cuda_plan


def run(argv: list[str]) -> int:
    if not argv or "=" not in argv[0]:
        raise SystemExit(__doc__)
    name, value = argv[0].split("=", 1)
    if not hasattr(cuda_plan, name):
        raise SystemExit(f"braze.codegen.cuda_plan has no constant {name}")
    setattr(cuda_plan, name, type(getattr(cuda_plan, name))(value))
    rest = argv[1:]
    if "--quick" not in rest and "--models" not in rest:
        rest = ["--models", *rest]
    return main([*rest, "--braze-only"] if "--braze-only" not in rest else rest)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
