"""GPU benchmarks: braze against the copy ceiling and the peers installed (torch eager,
torch.compile, CuPy), all measured in one run on one GPU. Prints a table and writes JSON.

Each workload is checked against torch before it is timed (outputs poisoned first). Times are
medians of CUDA-event-timed calls after a warm-up; GB/s counts the bytes read and written once.

    python benchmarks/gpu.py [--quick]
    python benchmarks/gpu.py --latency    # the compile-latency figures alone

The first-call figures come from fresh processes: one with an empty disk cache (cold), then
WARM_PROCESSES more over the cache it filled, whose median is the warm figure.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import braze as bz
from braze import config, engine
from braze.cli.bench.timing import copy_ceiling_gbps, device_ms, gbps

sys.path.insert(0, str(Path(__file__).parent))
from gpu_fusions import layer_norm_fusion, relu_fma_fusion, rms_norm_fusion, softmax_fusion  # noqa: E402

RESULTS = Path(__file__).parent / "results"
QUICK = "--quick" in sys.argv
WARM_PROCESSES = 5


def host_us(fn, repeats: int = 200) -> float:
    """Median wall time of one call including launch overhead (synchronized), in microseconds."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def profiled_kernels_ms(fusion, inputs, repeats: int = 10) -> tuple[int, float]:
    """(kernels per call, median of their summed device time) from bz.record(profile=True)."""
    totals, count = [], 0
    for _ in range(repeats):
        with bz.record(profile=True) as rec:
            fusion.execute(inputs)
        totals.append(sum(launch.device_ms for launch in rec.launches))
        count = len(rec.launches)
    return count, statistics.median(totals)


# --- workloads ---------------------------------------------------------------------------------------
def workloads():
    n = 1 << 22 if QUICK else 1 << 26
    rows, cols = (1024, 8192) if QUICK else (4096, 8192)
    ln_rows = 2048 if QUICK else 8192
    g = torch.Generator(device="cuda").manual_seed(0)
    rand = lambda *shape, dtype=torch.float32: torch.randn(*shape, device="cuda", generator=g).to(dtype)

    x, y, z = rand(n), rand(n), rand(n)
    yield ("relu(x*y+z) 64M f32" if not QUICK else "relu(x*y+z) 4M f32", relu_fma_fusion(), [x, y, z],
           lambda x, y, z: torch.relu(x * y + z), 4 * n * 4)
    s = rand(rows, cols)
    yield (f"softmax [{rows},{cols}] f32", softmax_fusion(), [s], lambda s: torch.softmax(s, -1), 2 * s.numel() * 4)
    ln, w, b = rand(ln_rows, 4096), rand(4096), rand(4096)
    yield (f"layer_norm [{ln_rows},4096] f32", layer_norm_fusion(), [ln, w, b],
           lambda x, w, b: torch.nn.functional.layer_norm(x, (4096,), w, b, 1e-5), 2 * ln.numel() * 4)
    r, rw = rand(ln_rows, 4096, dtype=torch.bfloat16), rand(4096, dtype=torch.bfloat16)

    def rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(torch.bfloat16)
    yield (f"rms_norm [{ln_rows},4096] bf16", rms_norm_fusion(), [r, rw], rms, 2 * r.numel() * 2)


def check(name, fusion, inputs, peer) -> float:
    with config.scope(enable="poison_outputs"):
        (out,) = fusion.execute(inputs)
    expected = peer(*inputs)
    error = (out.float() - expected.float()).abs().max().item()
    tolerance = 2e-2 if out.dtype == torch.bfloat16 else 1e-4  # relative: a bfloat16 ulp is 2**-8
    if not torch.allclose(out.float(), expected.float(), rtol=tolerance, atol=tolerance):
        raise SystemExit(f"{name}: braze differs from torch by up to {error} (tolerance {tolerance})")
    return error


def compiled_peer(peer):
    try:
        return torch.compile(peer)
    except Exception:  # noqa: BLE001  (no torch.compile here: the row shows no figure)
        return None


def measure() -> list[dict]:
    ceiling = copy_ceiling_gbps(256 << 20)
    return [measure_one(*workload, ceiling) for workload in workloads()]


def measure_one(name, fusion, inputs, peer, nbytes: int, ceiling: float) -> dict:
    error = check(name, fusion, inputs, peer)
    row = {"workload": name, "max_abs_error": error, "copy_gbps": ceiling}
    row["braze_gbps"] = gbps(nbytes, device_ms(lambda: fusion.execute(inputs)))
    row["braze_kernels"], kernel_ms = profiled_kernels_ms(fusion, inputs)
    row["braze_kernel_gbps"] = gbps(nbytes, kernel_ms)
    row["braze_call_us"] = host_us(lambda: fusion.execute(inputs))
    row["torch_gbps"] = gbps(nbytes, device_ms(lambda: peer(*inputs)))
    compiled = compiled_peer(peer)
    if compiled is not None and not QUICK:
        try:
            row["torch_compile_gbps"] = gbps(nbytes, device_ms(lambda: compiled(*inputs)))
        except Exception as e:  # noqa: BLE001
            row["torch_compile_error"] = type(e).__name__
    if name.startswith("relu"):
        row.update(cupy_relu_fma(inputs, nbytes))
    return row


def cupy_relu_fma(inputs, nbytes) -> dict:
    try:
        import cupy
    except ImportError:
        return {}
    kernel = cupy.ElementwiseKernel("float32 x, float32 y, float32 z", "float32 out",
                                    "out = max(x * y + z, 0.0f)", "relu_fma")
    x, y, z = (cupy.asarray(t) for t in inputs)
    out = cupy.empty_like(x)
    return {"cupy_gbps": gbps(nbytes, device_ms(lambda: kernel(x, y, z, out)))}


# --- compile latency, each in a fresh process so nothing is cached in memory --------------------
_PROBE = """
import time, torch, braze as bz
x = torch.randn(1000, device="cuda"); torch.cuda.synchronize()
t0 = time.perf_counter()
with bz.Fusion() as f:
    a, b = f.define_tensor([-1]), f.define_tensor([-1])
    f.add_output(bz.ops.relu(a * b + 1.0))
f.execute([x, x]); torch.cuda.synchronize()
t1 = time.perf_counter()
f.execute([x, x]); torch.cuda.synchronize()
print((t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3)
"""


def first_calls_ms(cache_dir: str) -> tuple[float, float]:
    """The first and the second call of a new fusion in a fresh process (the second builds the
    native launch table of the cached call)."""
    env = {**os.environ, "BRAZE_CACHE_DIR": cache_dir}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    first, second = map(float, out.stdout.strip().splitlines()[-1].split())
    return first, second


def compile_bytecode() -> None:
    """Compiles the bytecode of braze and of the CUDA packages its first call imports, as
    installing them does: where Python writes none (PYTHONDONTWRITEBYTECODE, as on the GPU machines
    here) every fresh process would otherwise compile their source again, 5-40 ms of the figures."""
    import compileall
    import importlib.util

    for package in ("braze", "cuda.bindings", "cuda.pathfinder"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            for folder in spec.submodule_search_locations:
                compileall.compile_dir(folder, quiet=1)


def compile_latency() -> dict:
    compile_bytecode()
    with tempfile.TemporaryDirectory() as cache:
        cold, _ = first_calls_ms(cache)
        warm = [first_calls_ms(cache) for _ in range(WARM_PROCESSES)]
    return {"cold_first_call_ms": cold, "warm_cache_first_call_ms": statistics.median(w[0] for w in warm),
            "warm_cache_first_call_samples_ms": [w[0] for w in warm],
            "warm_cache_second_call_ms": statistics.median(w[1] for w in warm)}


def print_latency(latency: dict) -> None:
    samples = ", ".join(f"{ms:.1f}" for ms in latency["warm_cache_first_call_samples_ms"])
    print(f"cold first call (trace to cubin, empty cache): {latency['cold_first_call_ms']:.0f} ms; "
          f"first call with a warm disk cache: {latency['warm_cache_first_call_ms']:.1f} ms (median of "
          f"{WARM_PROCESSES} fresh processes: {samples}); the second call of those processes: "
          f"{latency['warm_cache_second_call_ms']:.1f} ms")


def main() -> None:
    if "--latency" in sys.argv:
        print_latency(compile_latency())
        return
    engine._kernels.clear()
    rows = measure()
    latency = compile_latency()
    device = torch.cuda.get_device_name()
    print(f"\nbraze on {device} (CUDA events, medians; GB/s = bytes read + written once / time)")
    header = (f"{'workload':34} {'kern':>4} {'braze':>8} {'%copy':>6} {'kernel':>8} {'torch':>8} {'compile':>8} "
              f"{'cupy':>8} {'x torch':>8} {'x comp':>7}")
    print(header)
    for r in rows:
        comp = r.get("torch_compile_gbps")
        print(f"{r['workload']:34} {r['braze_kernels']:4d} {r['braze_gbps']:8.0f} "
              f"{100 * r['braze_gbps'] / r['copy_gbps']:5.0f}% {r['braze_kernel_gbps']:8.0f} "
              f"{r['torch_gbps']:8.0f} {comp or float('nan'):8.0f} {r.get('cupy_gbps', float('nan')):8.0f} "
              f"{r['braze_gbps'] / r['torch_gbps']:8.2f} {(r['braze_gbps'] / comp) if comp else float('nan'):7.2f}")
    print(f"copy ceiling: {rows[0]['copy_gbps']:.0f} GB/s")
    print_latency(latency)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("gpu-quick.json" if QUICK else "gpu.json")
    out.write_text(json.dumps({"device": device, "rows": rows, **latency}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
