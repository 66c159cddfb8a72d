"""CPU benchmarks of the compiled backend against NumPy and numexpr (prints a table, writes JSON).

    .venv/bin/python benchmarks/cpu.py [--small] [--section fusions|reductions]

The reductions section times what takes the column-strip schedule and pairwise sums (column sums,
softmax over axis 0, a sum over the middle axis of a 3-D tensor) and a 16M-element full sum.

Each row: braze's median time per call after a warm-up, NumPy's and numexpr's on the same
float32 data, the ratios, the cold compile time (first call, empty cache) and the warm-cache
first call (a fresh fusion whose kernel is on disk but not in memory, as in a new process).
Results are checked against NumPy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from timing import median_ms

import braze as bz
from braze import config, engine

try:
    import numexpr
except ImportError:  # numexpr is a test extra; the table then leaves its column empty
    numexpr = None

RESULTS = Path(__file__).parent / "results"


def _expr(f):
    a, b, c, d = (f.define_tensor((-1,)) for _ in range(4))
    f.add_output(a * b + c * d - bz.ops.sin(a))


def _softmax(f):
    f.add_output(bz.ops.softmax(f.define_tensor((-1, -1))))


def _layer_norm(f):
    f.add_output(bz.ops.layer_norm(f.define_tensor((-1, -1))))


def _chain(f):
    """GELU(x + bias), dropout by a mask, scaled, plus the residual: 12 ops."""
    x, bias, mask, residual = (f.define_tensor(s) for s in ((-1, -1), (-1,), (-1, -1), (-1, -1)))
    h = x + bias
    g = 0.5 * h * (1.0 + bz.ops.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))
    f.add_output(bz.ops.where(mask > 0.1, g * (1.0 / 0.9), 0.0) + residual)


def _numpy_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _numpy_layer_norm(x):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + np.float32(1e-5))


def _numpy_chain(x, bias, mask, residual):
    h = x + bias
    g = np.float32(0.5) * h * (1 + np.tanh(np.float32(0.7978845608) * (h + np.float32(0.044715) * h * h * h)))
    return np.where(mask > 0.1, g * np.float32(1 / 0.9), np.float32(0)) + residual


def _column_sum(f):
    f.add_output(f.define_tensor((-1, -1)).sum(0))


def _softmax_axis0(f):
    f.add_output(bz.ops.softmax(f.define_tensor((-1, -1)), axis=0))


def _middle_sum(f):
    f.add_output(f.define_tensor((-1, -1, -1)).sum(1))


def _full_sum(f):
    f.add_output(bz.ops.sum(f.define_tensor((-1,))))


def _numpy_softmax_axis0(x):
    e = np.exp(x - x.max(0, keepdims=True))
    return e / e.sum(0, keepdims=True)


def reduction_cases(small: bool) -> list[dict]:
    """Reductions over outer axes (column strips) and a long full sum (pairwise), against NumPy."""
    r = np.random.default_rng(1)
    scale = 4 if small else 1
    column_shapes = [(4096 // scale, 1024), (1024 // scale, 4096), (65536 // scale, 64)]
    rows = [{"name": f"column sum {list(shape)}", "build": _column_sum,
             "inputs": [r.standard_normal(shape, np.float32)], "numpy": lambda x: x.sum(0)}
            for shape in column_shapes]
    rows += [{"name": f"softmax axis 0 {list(shape)}", "build": _softmax_axis0,
              "inputs": [r.standard_normal(shape, np.float32)], "numpy": _numpy_softmax_axis0}
             for shape in column_shapes[:2]]
    middle = (64 // scale, 512, 256)
    rows.append({"name": f"middle-axis sum {list(middle)}", "build": _middle_sum,
                 "inputs": [r.standard_normal(middle, np.float32)], "numpy": lambda x: x.sum(1)})
    n = (1 << 24) // scale
    rows.append({"name": f"full sum [{n}]", "build": _full_sum, "inputs": [r.standard_normal(n, np.float32)],
                 "numpy": lambda x: x.sum()})
    return rows


def cases(small: bool) -> list[dict]:
    r = np.random.default_rng(0)
    n, rows, cols = (10_000_000, 4096, 4096) if not small else (1_000_000, 512, 512)
    ln_rows, ln_cols = (8192, 1024) if not small else (1024, 256)
    vec = [r.standard_normal(n, np.float32) for _ in range(4)]
    mat = r.standard_normal((rows, cols), np.float32)
    ln = r.standard_normal((ln_rows, ln_cols), np.float32)
    chain = [mat, r.standard_normal(cols, np.float32), r.random((rows, cols), np.float32),
             r.standard_normal((rows, cols), np.float32)]
    return [
        {"name": f"a*b + c*d - sin(a) [{n}]", "build": _expr, "inputs": vec,
         "numpy": lambda a, b, c, d: a * b + c * d - np.sin(a), "numexpr": "a*b + c*d - sin(a)"},
        {"name": f"softmax [{rows}, {cols}]", "build": _softmax, "inputs": [mat], "numpy": _numpy_softmax},
        {"name": f"layer_norm [{ln_rows}, {ln_cols}]", "build": _layer_norm, "inputs": [ln],
         "numpy": _numpy_layer_norm},
        {"name": f"gelu-bias-dropout-residual [{rows}, {cols}]", "build": _chain, "inputs": chain,
         "numpy": _numpy_chain,
         "numexpr": "where(mask > 0.1, 0.5 * (x + bias) * (1 + tanh(0.7978845608 * ((x + bias) + 0.044715 * "
                    "(x + bias) ** 3))) * (1 / 0.9), 0) + residual"},
    ]


def _fusion(build) -> bz.Fusion:
    with bz.Fusion() as f:
        build(f)
    return f


def run_case(case: dict) -> dict:
    inputs, build = case["inputs"], case["build"]
    with tempfile.TemporaryDirectory() as cache:
        with config.scope(cache_dir=Path(cache)):
            f = _fusion(build)
            engine.forget_compiled_kernels()
            start = time.perf_counter()
            (out,) = f.execute(inputs)
            cold_ms = (time.perf_counter() - start) * 1e3
            start = time.perf_counter()
            engine.forget_compiled_kernels()  # as in a new process: the kernel comes from the disk cache
            with bz.record() as rec:
                _fusion(build).execute(inputs)
            warm_ms = (time.perf_counter() - start) * 1e3
            assert not rec.compiles, f"{case['name']}: the warm-cache first call compiled {rec.compiles}"
    expected = case["numpy"](*inputs)
    error = float(np.max(np.abs(out - expected)) / (np.max(np.abs(expected)) or 1))
    row = {"case": case["name"], "braze_ms": median_ms(lambda: f.execute(inputs)),
           "numpy_ms": median_ms(lambda: case["numpy"](*inputs)), "cold_compile_ms": cold_ms,
           "warm_cache_first_call_ms": warm_ms, "max_rel_error": error}
    if numexpr is not None and "numexpr" in case:
        names = {"a": 0, "b": 1, "c": 2, "d": 3} if len(inputs) == 4 and inputs[0].ndim == 1 else \
            {"x": 0, "bias": 1, "mask": 2, "residual": 3}
        local = {k: inputs[v] for k, v in names.items()}
        row["numexpr_ms"] = median_ms(lambda: numexpr.evaluate(case["numexpr"], local_dict=local))
    row["x_numpy"] = row["numpy_ms"] / row["braze_ms"]
    row["x_numexpr"] = row["numexpr_ms"] / row["braze_ms"] if "numexpr_ms" in row else math.nan
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="smaller problems, for a quick check")
    parser.add_argument("--section", choices=("all", "fusions", "reductions"), default="all",
                        help="the fusions (elementwise, softmax, layer_norm, ...) or the reductions only")
    args = parser.parse_args()
    chosen = (cases(args.small) if args.section != "reductions" else []) + \
        (reduction_cases(args.small) if args.section != "fusions" else [])
    rows = [run_case(c) for c in chosen]
    print(f"{'case':<44} {'braze ms':>9} {'numpy ms':>9} {'numexpr':>8} {'x numpy':>8} {'x numexpr':>9} "
          f"{'cold ms':>8} {'warm ms':>8}")
    for r in rows:
        print(f"{r['case']:<44} {r['braze_ms']:9.2f} {r['numpy_ms']:9.2f} {r.get('numexpr_ms', math.nan):8.2f} "
              f"{r['x_numpy']:8.2f} {r['x_numexpr']:9.2f} {r['cold_compile_ms']:8.1f} "
              f"{r['warm_cache_first_call_ms']:8.1f}")
    RESULTS.mkdir(exist_ok=True)
    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": sys.version.split()[0],
            "numpy": np.__version__, "small": args.small, "section": args.section}
    section = "" if args.section == "all" else f"-{args.section}"
    out = RESULTS / f"cpu{'-small' if args.small else ''}{section}.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
