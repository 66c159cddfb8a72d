"""Benchmarks: times every gallery fusion on each available backend against NumPy, prints a table
and writes JSON to benchmarks/results/. Timing lives here, never in tests."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import numpy as np
from timing import median_ms

import braze as bz
from braze import engine
from braze.cli.gallery import GALLERY, GalleryEntry

RESULTS = Path(__file__).parent / "results"


def bench_entry(entry: GalleryEntry, backend: str) -> dict:
    with bz.Fusion() as f:
        entry.build(f)
    inputs = entry.inputs(np.random.default_rng(0))
    braze_ms = median_ms(lambda: f.execute(inputs, backend=backend))
    numpy_version = entry.numpy_version()
    numpy_ms = median_ms(lambda: numpy_version(*inputs))
    return {"fusion": entry.name, "backend": backend, "braze_ms": braze_ms, "numpy_ms": numpy_ms,
            "speedup_vs_numpy": numpy_ms / braze_ms}


def main() -> int:
    rows = [bench_entry(e, b) for e in GALLERY for b in sorted(engine.BACKENDS)]
    print(f"{'fusion':<14} {'backend':<10} {'braze ms':>9} {'numpy ms':>9} {'x numpy':>8}")
    for r in rows:
        print(f"{r['fusion']:<14} {r['backend']:<10} {r['braze_ms']:9.3f} {r['numpy_ms']:9.3f} "
              f"{r['speedup_vs_numpy']:8.2f}")
    RESULTS.mkdir(exist_ok=True)
    meta = {"machine": platform.machine(), "processor": platform.processor(), "python": sys.version.split()[0],
            "numpy": np.__version__}
    out = RESULTS / "gallery-cpu.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
