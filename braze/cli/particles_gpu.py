"""The particle step on a GPU: the `@bz.kernel` fused (one launch) and unfused (one launch per
loop), next to the same step in torch eager and torch.compile where torch is installed.

Used by `braze demo` and `benchmarks/sim_step.py`. Each result is checked against the NumPy step
before anything is timed. A step is host-bound at these sizes (a few µs of GPU work), so the
time per step is the wall time of many steps in a row, synchronized at both ends: what a
simulation loop sees. The median of several such batches is reported.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import braze as bz
from braze.cli.particles import DAMPING, GRAVITY, RESTITUTION, SIX_LOOPS, StepCase, recorded_steps
from braze.compile import cuda_driver
from braze.runtime.device_arrays import DeviceArray


@dataclass
class GpuStepRow:
    step: str
    particles: int
    device: str
    launches_fused: int
    launches_unfused: int
    us_fused: float
    us_unfused: float
    peers_us: dict[str, float] = field(default_factory=dict)  # torch eager, torch.compile
    kernel_us: float = 0.0  # the fused launch's device time (CUDA events, median)
    host_us: float = 0.0  # host time of a fused call, not waiting for the GPU (median)
    max_error: float = 0.0  # max |braze - NumPy| over x and v after `steps` steps
    us_replayed: float = float("nan")  # the fused step from a bz.graph() of GPU_GRAPH_STEPS steps, per step
    peer_errors: dict[str, float] = field(default_factory=dict)


GPU_GRAPH_STEPS = 1000  # steps recorded into one bz.graph() (one CUDA graph) for the replayed timing


def gpu_available() -> bool:
    return cuda_driver.device_count() > 0


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_step(x, v, f, mass, dt: float) -> None:
    """The six-loop step in torch, one tensor operation per loop (what a torch user writes)."""
    import torch

    f.zero_()
    f[:, 1] -= GRAVITY * mass
    v += f / mass[:, None] * dt
    v *= DAMPING
    x += v * dt
    below = x[:, 1] < 0
    x[:, 1] = torch.where(below, -x[:, 1] * RESTITUTION, x[:, 1])
    v[:, 1] = torch.where(below, -v[:, 1] * RESTITUTION, v[:, 1])


def us_per_step(step: Callable[[], None], synchronize: Callable[[], None], seconds: float,
                batches: int = 7) -> float:
    """The median over `batches` of the synchronized wall time of a run of steps, per step, after
    a warm-up of about a fifth of a second (the first runs of a process are slower: without it, the
    first case timed read 13-18 us where the same step timed later read 8)."""
    warm_until = time.perf_counter() + 0.2
    while time.perf_counter() < warm_until:
        for _ in range(10):
            step()
        synchronize()
    start = time.perf_counter()
    step()
    synchronize()
    count = max(10, int(seconds / batches / max(time.perf_counter() - start, 1e-6)))
    samples = []
    for _ in range(batches):
        synchronize()
        start = time.perf_counter()
        for _ in range(count):
            step()
        synchronize()
        samples.append((time.perf_counter() - start) / count * 1e6)
    return statistics.median(samples)


def _arrays(case: StepCase, n: int, torch):
    """Host arrays for the reference, and the same on the GPU (torch tensors, else DeviceArrays)."""
    host = case.arrays(n)
    if torch is not None:
        return host, [torch.from_numpy(a.copy()).cuda() for a in host]
    return host, [DeviceArray.from_numpy(a) for a in host]


def _to_host(array) -> np.ndarray:
    return array.numpy() if isinstance(array, DeviceArray) else array.cpu().numpy()


def _error(gpu: list, host: list) -> float:
    return max(float(np.max(np.abs(_to_host(g) - h))) for g, h in zip(gpu[:2], host[:2]))


def run_particle_step_gpu(n: int = 8192, steps: int = 20, seconds: float = 1.0, case: StepCase = SIX_LOOPS,
                          with_torch: bool = True, with_compile: bool = True) -> GpuStepRow:
    """Launch counts, µs per step on the GPU (fused, unfused, torch peers) and errors against NumPy."""
    torch = _torch()
    dt = np.float32(1e-3)
    reference, fused = _arrays(case, n, torch)
    _, unfused = _arrays(case, n, torch)
    with bz.record() as rec_fused:
        case.fused(*fused, dt)
    with bz.record() as rec_unfused:
        case.unfused(*unfused, dt)
    case.numpy(*reference, dt)
    for _ in range(steps - 1):
        case.fused(*fused, dt)
        case.numpy(*reference, dt)
    error = _error(fused, reference)  # before timing, which steps on
    synchronize = torch.cuda.synchronize if torch is not None else (lambda: cuda_driver.synchronize(0))
    us_fused = us_per_step(lambda: case.fused(*fused, dt), synchronize, seconds)
    us_unfused = us_per_step(lambda: case.unfused(*unfused, dt), synchronize, seconds)
    row = GpuStepRow(case.name, n, cuda_driver.device(0).name, len(rec_fused.launches), len(rec_unfused.launches),
                     us_fused, us_unfused, max_error=error,
                     kernel_us=_kernel_us(lambda: case.fused(*fused, dt)),
                     host_us=_host_us(lambda: case.fused(*fused, dt), synchronize))
    graph = recorded_steps(lambda: case.fused(*fused, dt), GPU_GRAPH_STEPS)
    row.us_replayed = us_per_step(graph.replay, synchronize, seconds) / GPU_GRAPH_STEPS
    if torch is not None and with_torch and case is SIX_LOOPS:
        _time_torch_peers(row, torch, case, n, steps, seconds, with_compile)
    return row


def _kernel_us(step: Callable[[], None], repeats: int = 21) -> float:
    """The median device time of a step's launches, by CUDA events (bz.record(profile=True))."""
    samples = []
    for _ in range(repeats):
        with bz.record(profile=True) as rec:
            step()
        samples.append(sum(launch.device_ms or 0.0 for launch in rec.launches) * 1e3)
    return statistics.median(samples)


def _host_us(step: Callable[[], None], synchronize: Callable[[], None], calls: int = 200, batches: int = 15) -> float:
    """The median host time of a step, the GPU idle at the start of each batch: few enough calls
    that the driver's launch queue never fills, so a slower GPU does not show."""
    samples = []
    for _ in range(batches):
        synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            step()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    synchronize()
    return statistics.median(samples)


def _time_torch_peers(row: GpuStepRow, torch, case: StepCase, n: int, steps: int, seconds: float,
                      with_compile: bool) -> None:
    peers: dict[str, Callable] = {"torch eager": torch_step}
    if with_compile:
        try:
            peers["torch.compile"] = torch.compile(torch_step)
        except Exception:  # noqa: BLE001  (torch.compile unavailable here: leave it out)
            pass
    dt = float(np.float32(1e-3))
    for name, step in peers.items():
        reference, arrays = _arrays(case, n, torch)
        try:
            for _ in range(steps):
                step(*arrays, dt)
                case.numpy(*reference, np.float32(dt))
        except Exception:  # noqa: BLE001  (a peer that fails to run here is left out of the table)
            continue
        row.peer_errors[name] = _error(arrays, reference)
        row.peers_us[name] = us_per_step(lambda s=step, a=arrays: s(*a, dt), torch.cuda.synchronize, seconds)
