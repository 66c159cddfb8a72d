"""The particle steps of `braze demo` (six loops, and a longer one of twelve): launches and µs per
step with task fusion on and off, on the CPU against NumPy and, where there is a GPU, on the GPU
against torch eager and torch.compile. Prints tables and writes JSON to benchmarks/results/
(sim-step-cpu.json; sim-step-gpu.json only when run on a GPU).

    .venv/bin/python benchmarks/sim_step.py            # CPU, then GPU when present
    .venv/bin/python benchmarks/sim_step.py --gpu      # the GPU section only
    .venv/bin/python benchmarks/sim_step.py --no-compile   # leave torch.compile out
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
from pathlib import Path

import numpy as np

from braze.cli.particles import SIX_LOOPS, TWELVE_LOOPS, run_particle_step
from braze.cli.particles_gpu import gpu_available, run_particle_step_gpu

RESULTS = Path(__file__).parent / "results"


def main() -> int:
    args = sys.argv[1:]
    if "--gpu" not in args:
        cpu_section()
    if gpu_available():
        gpu_section(with_compile="--no-compile" not in args)
    elif "--gpu" in args:
        print("no GPU found")
        return 1
    return 0


def _meta() -> dict:
    return {"machine": platform.machine(), "processor": platform.processor(), "python": sys.version.split()[0],
            "numpy": np.__version__}


def gpu_section(with_compile: bool) -> None:
    """µs per step on the GPU: braze fused (one launch) and unfused, torch eager and torch.compile."""
    rows = [run_particle_step_gpu(n, case=case, with_compile=with_compile)
            for case, sizes in ((SIX_LOOPS, (8192, 65536)), (TWELVE_LOOPS, (8192,))) for n in sizes]
    peers = sorted({p for r in rows for p in r.peers_us})
    print(f"\nOn {rows[0].device} (synchronized wall time of many steps, medians):")
    print(f"{'step':<9} {'particles':>9} {'launches':>9} {'fused us':>9} {'(kernel':>8} {'host)':>6} "
          f"{'unfused us':>11} "
          + " ".join(f"{p + ' us':>16}" for p in peers) + f" {'max err':>8}")
    for r in rows:
        print(f"{r.step:<9} {r.particles:9d} {r.launches_unfused:>4d} -> {r.launches_fused:<2d} {r.us_fused:9.1f} "
              f"{r.kernel_us:8.1f} {r.host_us:6.1f} "
              f"{r.us_unfused:11.1f} " + " ".join(f"{r.peers_us.get(p, float('nan')):16.1f}" for p in peers)
              + f" {r.max_error:8.1e}")
    RESULTS.mkdir(exist_ok=True)
    meta = _meta()
    try:
        import torch

        meta["torch"] = torch.__version__
    except ImportError:
        pass
    out = RESULTS / "sim-step-gpu.json"
    out.write_text(json.dumps({"meta": meta, "rows": [dataclasses.asdict(r) for r in rows]}, indent=2))
    print(f"\nwrote {out}")


def cpu_section() -> None:
    rows = [run_particle_step(n, seconds=1.0, case=case) for case in (SIX_LOOPS, TWELVE_LOOPS)
            for n in (1024, 8192, 65536)]
    print(f"{'step':<9} {'particles':>9} {'launches':>9} {'fused us':>9} {'unfused us':>11} {'NumPy us':>9} "
          f"{'max err':>8}")
    for r in rows:
        print(f"{r.step:<9} {r.particles:9d} {r.launches_unfused:>4d} -> {r.launches_fused:<2d} {r.us_fused:9.1f} "
              f"{r.us_unfused:11.1f} {r.us_numpy:9.1f} {r.max_error:8.1e}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "sim-step-cpu.json"
    out.write_text(json.dumps({"meta": _meta(), "rows": [dataclasses.asdict(r) for r in rows]}, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    sys.exit(main())
