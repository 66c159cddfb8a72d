"""Data-parallel scaling of examples/data_parallel.py: the braze-compiled model's training step on
one GPU and on every GPU of the machine (DDP over NCCL, one process a GPU, the same batch a GPU),
run by `torchrun`. Prints a table and writes JSON (default benchmarks/results/data-parallel.json).

    python benchmarks/data_parallel.py [--steps 30] [--out PATH]

The goal: throughput on two GPUs at least 1.8 times one GPU's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def step_time(ranks: int, steps: int) -> dict:
    """One torchrun of the example in benchmark mode; rank 0's JSON line."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                           str(ROOT / "examples" / "data_parallel.py"), "--bench", str(steps)],
                          capture_output=True, text=True, env=environment)
    if done.returncode:
        raise SystemExit(f"torchrun with {ranks} ranks failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "data-parallel.json")
    args = parser.parse_args()
    import torch

    gpus = torch.cuda.device_count()
    if gpus < 2:
        print(f"needs two GPUs; this machine has {gpus}")
        return 1
    runs = [step_time(ranks, args.steps) for ranks in sorted({1, 2, gpus})]
    print(f"{'GPUs':>4} {'batch/GPU':>9} {'step ms':>8} {'samples/s':>10} {'vs 1 GPU':>8}")
    for run in runs:
        run["speedup"] = run["samples_per_s"] / runs[0]["samples_per_s"]
        print(f"{run['ranks']:>4} {run['per_rank_batch']:>9} {run['step_ms']:>8.2f} {run['samples_per_s']:>10.0f} "
              f"{run['speedup']:>7.2f}x")
    args.out.write_text(json.dumps({"device": runs[0]["device"], "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
