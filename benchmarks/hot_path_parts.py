"""Where the host time of braze's cached GPU call goes, layer by layer (host time only: the GPU is
synchronized before each clock starts and not after, and each sample stays under the driver's
queue depth).

    python benchmarks/hot_path_parts.py

Rows, outermost first: `Fusion.execute` (calling the last prepared call's native builtin on torch
tensors), the fusion's `run` (the same call in Python: one generated function behind torch's
guard), the prepared call in Python without the guard; then the pieces the calls are made of,
each alone. The rows are
timed in turns (one sample of each, then the next round), so a drift of the machine's speed during
the run shows in every row alike; each figure is the median of its samples.
"""

from __future__ import annotations

import torch
from host_latency import us_per_call_in_turns

import braze as bz

CALLS, REPEATS = 400, 41


def main() -> None:
    x, y, z = (torch.randn(1024, device="cuda") for _ in range(3))
    inputs = [x, y, z]
    with bz.Fusion(name="relu_fma") as f:
        a, b, c = (f.define_tensor([-1]) for _ in range(3))
        f.add_output(bz.ops.relu(a * b + c))
    f.execute(inputs)
    f.execute(inputs)
    fast = f.__dict__["_fast_calls"]
    key = fast.key(inputs)
    prepared = fast.prepared[key]
    assert prepared.matches.function()(inputs) and fast.run != fast.find, "no torch guard"
    assert f.__dict__["_fast_calls"].native is not None, "no native call on torch tensors"
    stream = torch.cuda.current_stream().cuda_stream
    launch = prepared.launches[0]
    from cuda.bindings import driver  # the floor is cuda.bindings' launch
    handle = driver.CUfunction(launch.function)
    raw_stream = torch._C._cuda_getCurrentRawStream
    out = f.execute(inputs)[0]
    pointers = (x.data_ptr(), y.data_ptr(), z.data_ptr(), out.data_ptr())
    device = torch.device("cuda", 0)
    rows = {
        "Fusion.execute (the native call on torch tensors)": lambda: f.execute(inputs),
        "FastCalls.run (the Python call, guarded)": lambda: fast.run(inputs),
        "PreparedCall.run (unguarded)": lambda: prepared.run(inputs),
        "guard (TensorGuards.check)": lambda: prepared.matches.check(x, y, z),
        "key": lambda: fast.key(inputs),
        "key + lookup": lambda: fast.prepared.get(fast.key(inputs)),
        "torch.empty_strided": lambda: torch.empty_strided((1024,), (1,), device="cuda"),
        "torch.empty_strided (device object)": lambda: torch.empty_strided((1024,), (1,), dtype=torch.float32,
                                                                          device=device),
        "torch.empty": lambda: torch.empty((1024,), dtype=torch.float32, device=device),
        "torch.empty_like": lambda: torch.empty_like(x),
        "Tensor.new_empty": lambda: x.new_empty((1024,)),
        "Tensor.new_empty_strided": lambda: x.new_empty_strided((1024,), (1,)),
        "allocation (prepared)": lambda: prepared.plan.allocations[0](),
        "data_ptr x4": lambda: (x.data_ptr(), y.data_ptr(), z.data_ptr(), x.data_ptr()),
        "current raw stream": lambda: raw_stream(0),
        "native launch (ctypes call)": lambda: prepared.launch_all.call(stream),
        "native patched launch (builtin)": lambda: prepared.launch_all.patched(stream, *pointers),
        "floor: cuda.bindings cuLaunchKernel": lambda: driver.cuLaunchKernel(
            handle, launch.grid, 1, 1, launch.block, 1, 1, launch.shared, stream, launch.params_address, 0),
    }
    results = us_per_call_in_turns(rows, calls=CALLS, repeats=REPEATS, sync=False)
    print(f"\nhost us per call on {torch.cuda.get_device_name()} (GPU not waited for)\n")
    for name, us in results.items():
        print(f"{name:<40} {us:7.2f}")


if __name__ == "__main__":
    main()
