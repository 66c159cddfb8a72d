"""Host overhead of a cached call on the CPU backend: shape functions native (host JIT) against
Python, and where the time of a cached call goes (prints a table, writes JSON).

    .venv/bin/python benchmarks/host.py

Rows:
- a cached `relu(x * y + z)` call on 1024 float32, end to end, with the host JIT and without;
- the parts of that call: signature and lookup, binding the inputs, the shape function,
  allocating the output, packing the argument block, running the kernel;
- the shape function alone for a 4-D output with a split/merge allocation domain.
Times are in microseconds per call: the mean over many calls, the fastest of several repeats
(the least disturbed by other work on a shared machine).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import braze as bz
from braze import config, engine
from braze.host.program import Allocate, Launch
from braze.host.shapes import PythonShapeFunction, ShapeProgram, infer_layout
from braze.native.host_jit import NativeShapeFunction
from braze.runtime.inputs import bind_inputs

RESULTS = Path(__file__).parent / "results"


def us_per_call(fn: Callable[[], object], calls: int = 2000, repeats: int = 9) -> float:
    """The fastest over `repeats` of the mean time of `calls` calls, in microseconds."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return min(samples)


def _pointwise() -> bz.Fusion:
    with bz.Fusion() as f:
        x, y, z = (f.define_tensor((-1,)) for _ in range(3))
        f.add_output(bz.ops.relu(x * y + z))
    return f


def cached_call_rows() -> list[dict]:
    inputs = [np.random.default_rng(n).standard_normal(1024, np.float32) for n in range(3)]
    rows = []
    for jit_on in (True, False):
        f = _pointwise()
        with config.scope(disable="" if jit_on else "host_jit"):
            f.execute(inputs)  # compiles; the runtime keeps the shape function it was built with
        name = "native" if jit_on else "python"
        rows.append({"row": f"cached call, shapes {name}", "us": us_per_call(lambda f=f: f.execute(inputs))})
        rows += _parts(f, inputs, name)
    return rows


def _parts(f: bz.Fusion, inputs: list, name: str) -> list[dict]:
    """Each step of a cached call, timed on its own."""
    cache = engine._cache_of(f)
    (runtime,) = cache.entries.values()
    program = runtime.program
    bound = bind_inputs(f, inputs)
    (allocate,) = [i for i in program.instructions if isinstance(i, Allocate)]
    (launch,) = [i for i in program.instructions if isinstance(i, Launch)]
    scratch = program.new_frame(bound.arrays, bound.bindings)  # allocations replace each other here
    frame = program.new_frame(bound.arrays, bound.bindings)  # ...not here: the block points into it
    allocate.run(frame)
    block = launch.pack(frame)
    extents = [bound.bindings[n] for n in program.shapes.symbols]
    steps = {
        "signature + lookup": lambda: cache.runtime(f, bound),
        "bind inputs": lambda: bind_inputs(f, inputs),
        f"shape function ({name})": lambda: program.shape_function(extents),
        "new frame (shape function included)": lambda: program.new_frame(bound.arrays, bound.bindings),
        "allocate the output": lambda: allocate.run(scratch),
        "  (before: shapes evaluated from the IR, np.empty)": lambda: _allocate_by_evaluating(allocate.tv, bound),
        "pack the argument block": lambda: launch.pack(frame),
        "run the kernel (1024 elements)": lambda: launch.executor.run(block, bound.bindings),
    }
    return [{"row": f"  {step}", "us": us_per_call(fn)} for step, fn in steps.items()]


def _allocate_by_evaluating(tv, bound) -> np.ndarray:
    """What a cached call did before host programs: evaluate the output's extents symbolically."""
    return np.empty([d.extent.evaluate(bound.bindings) for d in tv.logical if not d.is_reduction], tv.dtype.numpy)


def shape_function_rows() -> list[dict]:
    """A 4-D output with a split/merge allocation domain: its shape function, native against Python."""
    f = bz.Fusion()
    t = f.define_tensor((-1, -1, -1, -1))
    t.split(1, 4).merge(2).split(0, 2)  # [ceildiv(N, 2), 2, ceildiv(C, 4), 4 * H, W]
    t.set_allocation_domain(t.loop)
    program = ShapeProgram.of("split_merge_4d", infer_layout(t).values)
    extents = [8, 30, 17, 33]
    native, python = NativeShapeFunction(program), PythonShapeFunction(program)
    assert native(extents) == python(extents)
    return [{"row": f"4-D split/merge shapes ({len(program.steps)} steps), {kind}", "us": us_per_call(lambda fn=fn:
                                                                                                       fn(extents))}
            for kind, fn in (("native", native), ("python", python))]


def main() -> int:
    rows = cached_call_rows() + shape_function_rows()
    width = max(len(r["row"]) for r in rows)
    print(f"{'host time of':<{width}}  {'us/call':>8}")
    for r in rows:
        print(f"{r['row']:<{width}}  {r['us']:8.2f}")
    RESULTS.mkdir(exist_ok=True)
    meta = {"machine": platform.machine(), "processor": platform.processor(), "cpus": os.cpu_count(),
            "python": sys.version.split()[0], "numpy": np.__version__}
    out = RESULTS / "host.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
