"""Host time of a cached call on the GPU: braze against the raw launch and the peers installed,
all in one run. Prints a table and writes benchmarks/results/host_latency.json.

    python benchmarks/host_latency.py

Rows (microseconds of host time per call: N asynchronous calls, one synchronize at the end, the
median over repeats; the floor, braze and the peers are sampled in turns):
- a cached single-kernel fusion `relu(x*y+z)` on 1024 float32 torch tensors, outputs allocated
  (`Fusion.execute`: on torch tensors, calling the last prepared call's native builtin);
- the floor: the same kernel through `cuda.bindings`' cuLaunchKernel with a prepacked argument
  block (and through libcuda by ctypes, as braze launches);
- CuPy ElementwiseKernel, Triton, torch eager and torch.compile on the same expression;
- the parts of braze's cached call, each timed alone: signature (the last call's guard; the key
  and lookup where the description changed), allocation, pointers, patching (the native builtin
  over an empty table), launch (the native launch function), and the two in one builtin call;
  and the same call through Python, as it runs where no native builtin is made;
- a fusion of 12 segments (pointwise and full reductions, alternating; 12 launches);
- shape inference of a 4-D output with a split/merge allocation domain, native against Python.
Each result is checked against torch before it is timed.
"""

from __future__ import annotations

import ctypes
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import braze as bz
from braze.host.shapes import PythonShapeFunction, ShapeProgram, infer_layout
from braze.native.host_jit import NativeShapeFunction
from braze.native.launch_jit import NativeLaunches
from braze.runtime import fast_call

RESULTS = Path(__file__).parent / "results"
N = 1024
CALLS = 2000
REPEATS = 15


def us_per_call(fn, calls: int = CALLS, repeats: int = REPEATS, sync: bool = True) -> float:
    """Median over `repeats` of the host time of `calls` asynchronous calls, one synchronize at the
    end (`sync=False`: the synchronize comes before the clock starts instead, so a GPU slower
    than the host does not show; keep calls x launches under the driver's queue of ~1000)."""
    return us_per_call_in_turns({"": fn}, calls, repeats, sync)[""]


def us_per_call_in_turns(rows: dict, calls: int = CALLS, repeats: int = REPEATS, sync: bool = True) -> dict:
    """`us_per_call` of every row, sampled in turns (one sample of each row, then the next round),
    so that a drift of the shared machine's speed shows in every row alike."""
    for fn in rows.values():
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            if sync:
                torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: statistics.median(values) for name, values in samples.items()}


def relu_fma() -> bz.Fusion:
    with bz.Fusion(name="relu_fma") as f:
        x, y, z = (f.define_tensor([-1]) for _ in range(3))
        f.add_output(bz.ops.relu(x * y + z))
    return f


def alternating_segments(reductions: int = 11) -> bz.Fusion:
    """Pointwise work and a full reduction broadcast back, repeated: each reduction ends a segment."""
    with bz.Fusion(name="alternating") as f:
        t = f.define_tensor([-1, -1])
        for i in range(reductions):
            t = bz.ops.relu(t * 1.01 + 0.01 * i)
            t = t - bz.ops.sum(t, axes=[0, 1]) * 1e-6
        f.add_output(t * 1.0)
    return f


def alternating_reference(x: torch.Tensor, reductions: int = 11) -> torch.Tensor:
    t = x.double()
    for i in range(reductions):
        t = torch.relu(t * 1.01 + 0.01 * i)
        t = t - t.sum() * 1e-6
    return t.float()


def prepared_call(f: bz.Fusion, inputs: list) -> fast_call.PreparedCall:
    fast = f.__dict__["_fast_calls"]
    return fast.prepared[fast.key(inputs)]


def peers(x, y, z) -> dict[str, object]:
    """The peers that are installed, each a function of no arguments computing relu(x*y+z)."""
    found = {"torch eager": lambda: torch.relu(x * y + z)}
    compiled = torch.compile(lambda a, b, c: torch.relu(a * b + c))
    try:
        compiled(x, y, z)
        found["torch.compile"] = lambda: compiled(x, y, z)
    except Exception as e:  # noqa: BLE001  (no compiler toolchain on this machine)
        print(f"torch.compile unavailable: {type(e).__name__}: {e}", file=sys.stderr)
    try:
        import cupy

        kernel = cupy.ElementwiseKernel("float32 x, float32 y, float32 z", "float32 o", "o = max(x * y + z, 0.0f)",
                                        "bz_relu_fma")
        cx, cy, cz = (cupy.asarray(t) for t in (x, y, z))
        found["CuPy ElementwiseKernel"] = lambda: kernel(cx, cy, cz)
    except ImportError:
        pass
    triton_call = _triton(x, y, z)
    if triton_call is not None:
        found["Triton"] = triton_call
    return found


def _triton(x, y, z):
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def relu_fma_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        value = tl.load(x_ptr + offsets, mask=mask) * tl.load(y_ptr + offsets, mask=mask) + tl.load(z_ptr + offsets,
                                                                                                    mask=mask)
        tl.store(out_ptr + offsets, tl.maximum(value, 0.0), mask=mask)

    def call():
        out = torch.empty_like(x)
        relu_fma_kernel[(triton.cdiv(N, 1024),)](x, y, z, out, N, BLOCK=1024)
        return out

    try:
        call()
    except Exception as e:  # noqa: BLE001
        print(f"Triton unavailable: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    return call


def check(name: str, got, expected: torch.Tensor) -> None:
    got = torch.as_tensor(got, device="cuda")
    if not torch.allclose(got, expected, rtol=1e-5, atol=1e-5):
        raise SystemExit(f"{name}: wrong result")


def floor_rows(prepared: fast_call.PreparedCall) -> dict:
    """The kernel launched with its prepacked block and nothing else (cuda.bindings and ctypes), as
    functions of no arguments."""
    from cuda.bindings import driver  # the floor is cuda.bindings' launch
    function, grid, threads, shared, params = (prepared.launches[0].function, prepared.launches[0].grid,
                                               prepared.launches[0].block, prepared.launches[0].shared,
                                               prepared.launches[0].params_address)
    cu_function = driver.CUfunction(function)
    stream = torch.cuda.current_stream().cuda_stream
    raw = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    raw.restype = ctypes.c_int
    raw.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    (result,) = driver.cuLaunchKernel(cu_function, grid, 1, 1, threads, 1, 1, shared, stream, params, 0)
    assert result == driver.CUresult.CUDA_SUCCESS, result
    assert raw(function, grid, 1, 1, threads, 1, 1, shared, stream, params, None) == 0
    return {
        "floor: cuLaunchKernel (cuda.bindings), prepacked":
            lambda: driver.cuLaunchKernel(cu_function, grid, 1, 1, threads, 1, 1, shared, stream, params, 0),
        "floor: cuLaunchKernel (ctypes), prepacked":
            lambda: raw(function, grid, 1, 1, threads, 1, 1, shared, stream, params, None),
    }


def part_rows(f: bz.Fusion, inputs: list, prepared: fast_call.CudaPreparedCall) -> dict[str, float]:
    """Each step of the cached call, timed alone (synchronizing only where it launches)."""
    fast = f.__dict__["_fast_calls"]
    plan = prepared.plan
    buffers = [allocate() for allocate in plan.allocations]
    native = prepared.launch_all
    assert native is not None and native.patched is not None, "no native patched launch"
    slots = [slot for slot, _, _ in plan.input_pointers] + [slot for slot, _ in plan.buffer_pointers]
    # The same builtin over an empty table: it patches the block and launches nothing.
    patch_only = NativeLaunches(prepared.device.driver_calls, [], prepared.address, slots)

    def pointers() -> list[int]:
        return [pointer(inputs[position]) for _, position, pointer in plan.input_pointers] + \
            [plan.buffer_pointer(buffers[n]) for _, n in plan.buffer_pointers]

    values = pointers()
    guard = prepared.matches.function()
    return {
        "  signature: the last call's guard": us_per_call(functools.partial(guard, inputs), sync=False),
        "  (another description: its key and lookup)": us_per_call(lambda: fast.prepared.get(fast.key(inputs)),
                                                                   sync=False),
        "  allocation": us_per_call(lambda: [allocate() for allocate in plan.allocations], sync=False),
        "  pointers (data_ptr of inputs and outputs)": us_per_call(pointers, sync=False),
        "  patching (the native builtin, no launch)": us_per_call(lambda: patch_only.patched(0, *values), sync=False),
        "  launch (default stream, native cuLaunchKernel)": us_per_call(lambda: native.call(0)),
        "  patching and launch (the native builtin)": us_per_call(
            lambda: native.patched(0, *values)),
        "  the same call in Python (guard, allocation, pointers, the patching builtin)": us_per_call(
            lambda: fast.run(inputs)),
    }


def shape_rows() -> dict[str, float]:
    t = bz.Fusion().define_tensor((-1, -1, -1, -1))
    t.split(1, 4).merge(2).split(0, 2)
    t.set_allocation_domain(t.loop)
    program = ShapeProgram.of("split_merge_4d", infer_layout(t).values)
    extents = [8, 30, 17, 33]
    native, python = NativeShapeFunction(program), PythonShapeFunction(program)
    assert native(extents) == python(extents)
    return {"shape inference 4-D split/merge, native": us_per_call(lambda: native(extents), sync=False),
            "shape inference 4-D split/merge, Python": us_per_call(lambda: python(extents), sync=False)}


def main() -> int:
    x, y, z = (torch.randn(N, device="cuda") for _ in range(3))
    expected = torch.relu(x * y + z)
    f = relu_fma()
    inputs = [x, y, z]
    check("braze", f.execute(inputs)[0], expected)
    with bz.record() as rec:
        check("braze (cached)", f.execute(inputs)[0], expected)
    assert rec.entries == [] and rec.compiles == [] and len(rec.launches) == 1, "the cached call built something"
    prepared = prepared_call(f, inputs)
    assert f.__dict__["_fast_calls"].native is not None, "no native call on torch tensors"
    calls = {**floor_rows(prepared), "braze cached call, outputs allocated": lambda: f.execute(inputs)}
    for name, fn in peers(x, y, z).items():
        check(name, fn(), expected)
        calls[name] = fn
    rows = us_per_call_in_turns(calls)
    rows.update(part_rows(f, inputs, prepared))

    big = torch.randn(64, 256, device="cuda")
    g = alternating_segments()
    with bz.record() as rec:
        got = g.execute([big])[0]
    torch.testing.assert_close(got, alternating_reference(big), rtol=1e-4, atol=1e-4)
    launches = len(rec.launches)
    g.execute([big])
    rows[f"12-segment fusion ({launches} launches), cached call"] = us_per_call(lambda: g.execute([big]), calls=50,
                                                                                 sync=False)
    rows.update(shape_rows())

    floor = rows["floor: cuLaunchKernel (cuda.bindings), prepacked"]
    width = max(map(len, rows))
    print(f"\nhost time per call on {torch.cuda.get_device_name()}, relu(x*y+z) on {N} float32\n")
    print(f"{'':<{width}}  {'us/call':>8}  {'x floor':>7}")
    for name, us in rows.items():
        print(f"{name:<{width}}  {us:8.2f}  {us / floor:7.2f}")
    twelve = next(v for k, v in rows.items() if k.startswith("12-segment"))
    print(f"\ngoal: cached call <= 1.5x floor: {rows['braze cached call, outputs allocated'] / floor:.2f}x; "
          f"12 segments <= 2 x floor x 12: {twelve / (12 * floor):.2f} x 12 x floor")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "host_latency.json"
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "n": N, "us_per_call": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
