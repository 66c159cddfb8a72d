"""The particle steps of `braze demo` (six loops, and a longer one of twelve) on the CPU: launches and
µs per step with task fusion on and off, against NumPy; prints a table and writes JSON to
benchmarks/results/.

    .venv/bin/python benchmarks/sim_step.py
"""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
from pathlib import Path

import numpy as np

from braze.demo_kernels import SIX_LOOPS, TWELVE_LOOPS, run_particle_step

RESULTS = Path(__file__).parent / "results"


def main() -> int:
    rows = [run_particle_step(n, seconds=1.0, case=case) for case in (SIX_LOOPS, TWELVE_LOOPS)
            for n in (1024, 8192, 65536)]
    print(f"{'step':<9} {'particles':>9} {'launches':>9} {'fused us':>9} {'unfused us':>11} {'NumPy us':>9} "
          f"{'max err':>8}")
    for r in rows:
        print(f"{r.step:<9} {r.particles:9d} {r.launches_unfused:>4d} -> {r.launches_fused:<2d} {r.us_fused:9.1f} "
              f"{r.us_unfused:11.1f} {r.us_numpy:9.1f} {r.max_error:8.1e}")
    RESULTS.mkdir(exist_ok=True)
    meta = {"machine": platform.machine(), "processor": platform.processor(), "python": sys.version.split()[0],
            "numpy": np.__version__}
    out = RESULTS / "sim-step-cpu.json"
    out.write_text(json.dumps({"meta": meta, "rows": [dataclasses.asdict(r) for r in rows]}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
