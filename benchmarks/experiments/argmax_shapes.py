"""argmax over the vocabulary at several row counts, and an argmax of a whole tensor, against torch
eager and torch.compile, in one process: greedy decoding's batch of 8, batch 1, and many rows.

    python benchmarks/experiments/argmax_shapes.py results/folder

Each shape runs the fusion suite's `argmax` case (braze/cli/bench/cases.py) at that shape, its JSON
into the folder given.
"""

from __future__ import annotations

import sys
from pathlib import Path

import braze as bz
from braze.cli.bench import cases
from braze.cli.bench.suite import main

SHAPES = [("argmax", (8, 50257)), ("argmax", (1, 128256)), ("argmax", (64, 128256)),
          ("argmax_all", (8192, 4096)), ("argmax_all", (1024, 1024))]


@cases.case("argmax_all", "argmax of a whole tensor", "float32", (8192, 4096), (64, 32000), (9, 1001),
            cases.normals(1), lambda xp, x: [x.argmax()])
def _argmax_all(f, shape, dtype):
    f.add_output(bz.ops.argmax(cases._input(f, 2, dtype, "x")))


def run(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, shape in SHAPES:
        cases.MODEL_SHAPES[name] = shape
        main(["--models", "--no-jax", "--cases", name, "--repeats", "20",
              "--out", str(folder / f"{name}-{'x'.join(map(str, shape))}.json")])


if __name__ == "__main__":
    run(Path(sys.argv[1]))
