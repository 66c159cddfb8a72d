"""Compile time of fusions that reuse values heavily, per stage (prints a table, writes JSON).

    .venv/bin/python benchmarks/compile_time.py [--nvrtc] [--json PATH]

Programs from tests/reuse_fusions.py: `t = t * sin(t) + t` repeated n times (3n ops, each value used
three times) and a wide fusion of about 200 ops mixing reuse, with two row reductions. Stages: lowering
and the Kernel IR passes (CPU), LLVM IR text, the native CPU code (LLVM's optimizer and code
generator, with an empty disk cache), the CUDA C++ source, and with --nvrtc its compile to PTX.
A stage that walked the Kernel IR as a tree would grow exponentially in n; each grows linearly.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import reuse_fusions as programs  # noqa: E402

import braze as bz  # noqa: E402
from braze import config, engine  # noqa: E402
from braze.codegen import cuda, llvm  # noqa: E402

PROGRAMS = {**{f"chain n={n}": (lambda x, row, n=n: [programs.chain(bz.ops, x, n)]) for n in (8, 10, 12, 20, 40, 60)},
            "wide 200 ops": lambda x, row: programs.wide(bz.ops, x, row, 200)}


def fusion(build) -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
        row = f.define_tensor(shape=(-1,), dtype=bz.float32)
        for out in build(x, row):
            f.add_output(out)
    return f


def timed(thunk) -> tuple[float, object]:
    started = time.perf_counter()
    result = thunk()
    return time.perf_counter() - started, result


def stages(f: bz.Fusion, nvrtc: bool) -> dict[str, float]:
    """Seconds per stage of `f`'s compile."""
    key = engine.signature(f, engine.bind_inputs(f, [np.ones((4, 8), np.float32), np.ones(8, np.float32)]))
    seconds: dict[str, float] = {}
    seconds["lower+passes"], lowered = timed(lambda: engine.lower_fusion(f, key))
    seconds["llvm ir"], _ = timed(lambda: llvm.generate(lowered.kernel))
    engine.forget_compiled_kernels()
    with config.scope(cache_dir=Path(tempfile.mkdtemp())):
        seconds["cpu native"], _ = timed(lambda: engine.cpu_kernel(lowered.kernel))
    seconds["cuda source"], source = timed(
        lambda: cuda.generate(engine.plan_kernel(f, key, views_on_host=False)[1], restrict=True))
    if nvrtc:
        from braze.compile import nvrtc as compiler

        seconds["nvrtc ptx"], _ = timed(lambda: compiler.compile_ptx(cuda.with_prelude(source.body), "k", "sm_90", ()))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvrtc", action="store_true", help="also compile the CUDA source to PTX with NVRTC")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    results = {}
    for name, build in PROGRAMS.items():
        f = fusion(build)
        results[name] = {"ops": len(f.exprs), **stages(f, args.nvrtc)}
        row = results[name]
        print(f"{name:14} {row['ops']:4} ops  " + "  ".join(f"{s} {v:6.3f}s" for s, v in row.items() if s != "ops"),
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
