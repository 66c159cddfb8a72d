"""The demo gallery on a GPU: each fusion on torch CUDA tensors (or braze DeviceArrays without
torch), checked against float64 NumPy, timed with CUDA events, next to the peers installed."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import braze as bz
from braze.cli.gallery import GALLERY, GalleryEntry
from braze.compile import cuda_driver

ROWS_FACTOR = 32  # the GPU gallery stacks the CPU gallery's rows this many times, to be worth a GPU


@dataclass
class GpuRow:
    name: str
    size: str  # the first input's shape, `8192x512`
    ops: int
    kernels: int
    max_error: float
    first_call_ms: float  # host wall time to the finished result: compiling (or the disk cache) included
    us_per_call: float  # a cached call, on the GPU's clock
    gbps: float
    peers_us: dict[str, float] = field(default_factory=dict)


def gpu_available() -> bool:
    return cuda_driver.device_count() > 0


def _stacked(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Inputs with ROWS_FACTOR times the rows: every input whose rows match the first's."""
    rows = inputs[0].shape[0]
    return [np.concatenate([a] * ROWS_FACTOR) if a.ndim and a.shape[0] == rows else a for a in inputs]


def _timer():
    """(a function timing a call in µs on the GPU, the array maker) for torch or DeviceArray."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        def timed(fn: Callable[[], object]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3
        return timed, lambda a: torch.from_numpy(a).cuda(), torch
    from braze.runtime.device_arrays import DeviceArray

    def timed(fn: Callable[[], object]) -> float:
        start, end = cuda_driver.Event(), cuda_driver.Event()
        cuda_driver.record_event(start)
        fn()
        cuda_driver.record_event(end)
        return cuda_driver.elapsed_ms(start, end) * 1e3
    return timed, DeviceArray.from_numpy, None


def _median_us(timed, fn, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    return statistics.median(timed(fn) for _ in range(repeats))


def _to_host(value) -> np.ndarray:
    if hasattr(value, "cpu"):
        return value.cpu().numpy()
    return value.numpy()


def run_gpu_entry(entry: GalleryEntry, with_compile: bool) -> GpuRow:
    timed, to_device, torch = _timer()
    with bz.Fusion(name=entry.name) as f:
        entry.build(f)
    host = _stacked(entry.inputs(np.random.default_rng(0)))
    inputs = [to_device(a) for a in host]
    cuda_driver.synchronize()
    start = time.perf_counter()
    (result,) = f.execute(inputs)  # the first call: compiles, or loads from the disk cache
    cuda_driver.synchronize()
    first_call_ms = (time.perf_counter() - start) * 1e3
    with bz.record() as rec:
        f.execute(inputs)
    expected = entry.expected(*[a.astype(np.float64) if a.dtype.kind == "f" else a for a in host])
    error = float(np.max(np.abs(_to_host(result).astype(np.float64) - expected)))
    us = _median_us(timed, lambda: f.execute(inputs))
    nbytes = sum(a.nbytes for a in host) + np.asarray(expected, np.float32).nbytes
    row = GpuRow(entry.name, "x".join(map(str, host[0].shape)), len(f.exprs), len(rec.launches), error,
                 first_call_ms, us, nbytes / us / 1e3)
    if torch is not None:
        eager = _torch_version(entry, torch)
        row.peers_us["torch"] = _median_us(timed, lambda: eager(*inputs))
        if with_compile:
            try:
                compiled = torch.compile(eager)
                row.peers_us["torch.compile"] = _median_us(timed, lambda: compiled(*inputs))
            except Exception:  # noqa: BLE001  (no working torch.compile here: the column stays empty)
                pass
    return row


def _torch_version(entry: GalleryEntry, torch) -> Callable:
    """The same computation in torch, for the peer columns."""
    F = torch.nn.functional
    return {
        "gelu_bias": lambda x, b: F.gelu(x + b),
        "rope": lambda x, c, s: torch.cat([x[..., :32] * c - x[..., 32:] * s, x[..., 32:] * c + x[..., :32] * s], -1),
        "layer_norm": lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5),
        "rms_norm": lambda x: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6),
        "softmax": lambda x: torch.softmax(x, -1),
        "cross_entropy": lambda logits, target: F.cross_entropy(logits, target),
    }[entry.name]


def run_gpu_gallery(with_compile: bool = True) -> list[GpuRow]:
    return [run_gpu_entry(entry, with_compile) for entry in GALLERY]
