"""The CUDA backend's launch under `bz.record()`, for fusions (runtime/cuda_kernel.py) and loop
kernels (runtime/kernel_launch_cuda.py) alike: each launch noted, and timed with CUDA events when
profiling."""

from __future__ import annotations

from collections.abc import Callable

from braze.runtime import cuda_driver as cuda
from braze.runtime.record import RecordedLaunch, note_launch, profiling


def recorded_launch(recorded: RecordedLaunch, stream: int, launch: Callable[[], None] | None,
                    nbytes: Callable[[], int] | None = None) -> None:
    """Makes a launch (`launch()`; None: an empty one, only noted) noted as `recorded`. Under
    bz.record(profile=True) it is timed with events on `stream`, and `nbytes()` (the bytes of its
    array arguments, where known) over that time is its bandwidth."""
    timed = launch is not None and profiling()
    if timed:
        start, end = cuda.event(), cuda.event()
        cuda.record_event(start, stream)
    if launch is not None:
        launch()
    if timed:
        cuda.record_event(end, stream)
        recorded.device_ms = cuda.elapsed_ms(start, end)
        if nbytes is not None:
            recorded.gbps = nbytes() / recorded.device_ms / 1e6
    note_launch(recorded)
