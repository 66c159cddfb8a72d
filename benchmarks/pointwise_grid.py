"""Grid sizes for a pointwise kernel: braze's relu(x*y+z) on 64M float32 launched with several grids
(its loop strides over the grid, so any grid computes the same), each launch timed alone with CUDA
events, against CuPy's ElementwiseKernel and a copy. The measurement behind
`POINTWISE_ELEMENTS_PER_THREAD` (codegen/cuda_launch.py).

    python benchmarks/pointwise_grid.py
"""

from __future__ import annotations

import statistics

import torch
from cuda.bindings import driver

import braze as bz

N = 1 << 26
BLOCK_ELEMENTS = 256  # braze's block size


def gbps(run, nbytes: int, repeats: int = 30) -> float:
    for _ in range(5):
        run()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return nbytes / statistics.median(times) / 1e6


def main() -> None:
    x, y, z = (torch.randn(N, device="cuda") for _ in range(3))
    with bz.Fusion(name="relu_fma") as f:
        a, b, c = (f.define_tensor([-1]) for _ in range(3))
        f.add_output(bz.ops.relu(a * b + c))
    f.execute([x, y, z])
    (out,) = f.execute([x, y, z])  # the prepared call's block now holds these pointers
    torch.testing.assert_close(out, torch.relu(x * y + z))
    fast = f.__dict__["_fast_calls"]
    launch = fast.prepared[fast.key([x, y, z])].launches[0]
    function, stream = driver.CUfunction(launch.function), torch.cuda.current_stream().cuda_stream
    print(f"braze's grid for {N} elements: {launch.grid} blocks of {launch.block}")
    blocks = N // BLOCK_ELEMENTS
    for per_thread in (1, 2, 4, 8, 64, 248):
        grid = blocks // per_thread
        out.fill_(float("nan"))
        def run(grid: int = grid) -> None:
            driver.cuLaunchKernel(function, grid, 1, 1, launch.block, 1, 1, 0, stream, launch.params_address, 0)

        speed = gbps(run, 16 * N)
        torch.testing.assert_close(out, torch.relu(x * y + z))
        print(f"{per_thread:4d} elements a thread, grid {grid:8d}: {speed:6.0f} GB/s")
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        kernel = cupy.ElementwiseKernel("float32 x, float32 y, float32 z", "float32 o", "o = max(x * y + z, 0.0f)",
                                        "relu_fma")
        cx, cy, cz = (cupy.asarray(t) for t in (x, y, z))
        co = cupy.empty_like(cx)
        print(f"CuPy ElementwiseKernel: {gbps(lambda: kernel(cx, cy, cz, co), 16 * N):6.0f} GB/s")
    print(f"copy: {gbps(lambda: out.copy_(x), 8 * N):6.0f} GB/s")


if __name__ == "__main__":
    main()
