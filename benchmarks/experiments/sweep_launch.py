"""The CUDA launch planner's constants (braze/codegen/cuda_launch.py) swept over cases of the fusion
suite, braze alone, one constant at a time from the defaults: which values each case would rather
have. Every setting's outputs are checked against the float64 reference before it is timed.

    python benchmarks/experiments/sweep_launch.py [--mode models] [--cases a,b] [--repeats 20]

Each setting builds the case's fusion anew (its launches are planned when its call is prepared);
the kernels come from the cache. `MAX_LANES` caps the lanes a row takes (LaunchPlanner._lanes).
"""

from __future__ import annotations

import argparse
import itertools
import sys

from braze.cli.bench import timing
from braze.cli.bench.cases import selected
from braze.cli.bench.check import Prepared, build_fusion, host, measure
from braze.cli.bench.suite import rotation
from braze.codegen import cuda_launch

SWEEPS = {
    "COLUMNS_PER_BLOCK": (16, 64),
    "MIN_COLUMNS_PER_BLOCK": (4, 16),
    "REDUCTION_ELEMENTS_PER_THREAD": (4, 8, 32, 64),
    "NARROW_MIN_ROWS_PER_SM": (2, 32),
    "DIVIDED_ELEMENTS_PER_THREAD": (16, 256),
    "COMBINED_ROW_ELEMENTS": (8, 24, 48),
    "MAX_LANES": (32, 128),
}
DEFAULT_CASES = ("column_sum,full_sum,middle_sum,param_grads,batch_norm,group_norm,var_mean,layer_norm,"
                 "layer_norm_bf16,rms_norm,add_rms_norm,rope,softmax_backward,scaled_masked_softmax")


def capped_lanes(cap: int):
    original = cuda_launch.LaunchPlanner._lanes

    def lanes(self, task, rows, row_length):
        return min(original(self, task, rows, row_length), cap)
    return lanes


def apply(knob: str, value: int) -> object:
    """Sets one knob; returns what undoes it."""
    if knob == "MAX_LANES":
        before = cuda_launch.LaunchPlanner._lanes
        cuda_launch.LaunchPlanner._lanes = capped_lanes(value)
        return lambda: setattr(cuda_launch.LaunchPlanner, "_lanes", before)
    before = getattr(cuda_launch, knob)
    setattr(cuda_launch, knob, value)
    return lambda: setattr(cuda_launch, knob, before)


def timed(p: Prepared, sets: list, repeats: int) -> dict:
    fusion = build_fusion(p.case, p.shape)
    cycle = itertools.cycle(sets)
    return measure(lambda: [host(o) for o in fusion.execute(sets[0])],
                   lambda: timing.device_ms(lambda: fusion.execute(next(cycle)), repeats), p.want, p.nbytes)


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="models")
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    print(f"{torch.cuda.get_device_name()}: GB/s of each setting, and its ratio to the defaults")
    for case in selected(args.cases, args.mode):
        p = Prepared(case, args.mode)
        sets, _ = rotation(torch, p, l2)
        base = timed(p, sets, args.repeats)
        if base["status"] != "ok":
            print(f"{case.name:<22} defaults: {base}")
            continue
        cells = []
        for knob, values in SWEEPS.items():
            for value in values:
                undo = apply(knob, value)
                try:
                    got = timed(p, sets, args.repeats)
                finally:
                    undo()
                ratio = base["ms"] / got["ms"] if got["status"] == "ok" else 0.0
                if got["status"] != "ok" or abs(ratio - 1) >= 0.03:
                    cells.append(f"{knob}={value}: {ratio:.2f}" if got["status"] == "ok" else
                                 f"{knob}={value}: {got['status']} {got.get('error', '')[:80]}")
        print(f"{case.name:<22} {p.shape} defaults {base['gbps']:.0f} GB/s; " + ("; ".join(cells) or "no change"),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
