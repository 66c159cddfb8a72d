"""One case of the fusion suite timed at several shapes, braze alone or beside torch.compile: a line
per shape. Every shape's outputs are checked against the float64 reference before it is timed.

    python benchmarks/experiments/case_shapes.py batch_norm 32x2048x7x7,32x1024x14x14 [--peers]

torch.compile recompiles for dynamic shapes once it has seen a second shape: with `--peers`, only
the first shape's figure is that of a static-shape kernel.
"""

from __future__ import annotations

import argparse

from braze.cli.bench import cases
from braze.cli.bench.suite import run_gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case")
    parser.add_argument("shapes", help="comma list of shapes, each extents joined by x")
    parser.add_argument("--peers", action="store_true", help="also time torch.compile")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    for text in args.shapes.split(","):
        shape = tuple(int(n) for n in text.split("x"))
        cases.MODEL_SHAPES[args.case] = shape
        (row,) = run_gpu(cases.selected(args.case, "models"), "models", args.repeats, None, peers=args.peers)["rows"]
        braze, peer = row["braze"], row.get("torch_compile", {})
        us = lambda r: f"{r['ms'] * 1000:8.1f} us" if "ms" in r else f"{r.get('error', '-'):>11}"  # noqa: E731
        print(f"{args.case} {text:<18} braze {us(braze)}  torch.compile {us(peer)}", flush=True)


if __name__ == "__main__":
    main()
