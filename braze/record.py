"""`bz.record()`: what braze did on this thread while recording, for tests and curious users.

Recording costs one thread-local lookup per event when no recorder is active.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

from braze import config

_local = threading.local()
# Recordings open on any thread: native cached calls (native/torch_call.py) read it and leave a call
# to the Python path, which looks at this thread's recorders, while it is not zero.
OPEN_RECORDINGS = ctypes.c_int64(0)
_counting = threading.Lock()


@dataclass
class RecordedLaunch:
    """One task run: the kernel's task name (on a GPU, the name of the function that ran it: a
    task's `_warp` function for one warp a row) and its index range."""

    kernel: str
    task: str
    begin: int
    end: int
    chunks: int = 1  # how many threads shared the range (CPU), or blocks in the grid (GPU)
    device_ms: float | None = None  # under record(profile=True), on a GPU: the kernel's time
    gbps: float | None = None  # and the bytes of its array arguments over that time


@dataclass
class Recording:
    # A bz.graph() (runtime/graph.py): its GPU launches go to a stream under capture, where a module
    # unload (compile/cuda_driver.py) would end the capture in error.
    captures: ClassVar[bool] = False
    profile: bool = False
    launches: list[RecordedLaunch] = field(default_factory=list)
    compiles: list[str] = field(default_factory=list)  # kernels compiled (not found in any cache)
    segments: list[list[str]] = field(default_factory=list)  # per fusion compiled: the tensors its tasks write
    entries: list[str] = field(default_factory=list)  # executor entries and prepared calls built (cache misses)


@contextmanager
def record(profile: bool = False) -> Iterator[Recording]:
    """Records launches, compilations and segmentations on this thread for the `with` body.
    `profile=True` also times each GPU kernel with CUDA events (which waits for each kernel)."""
    with push_recording(Recording(profile)) as recording:
        yield recording


@contextmanager
def push_recording(recording: Recording) -> Iterator[Recording]:
    """Makes `recording` (a Recording, or a subclass such as runtime/graph.py's Graph) active on this
    thread for the `with` body: every launch, compile and prepared call is noted into it, and every
    cached call takes the Python path, where launch sites look at the active recordings."""
    stack = _local.__dict__.setdefault("stack", [])
    stack.append(recording)
    _count_open(1)
    try:
        yield recording
    finally:
        stack.pop()
        _count_open(-1)


def _count_open(change: int) -> None:
    with _counting:
        OPEN_RECORDINGS.value += change


def active_recordings() -> list[Recording]:
    """The recordings open on this thread, outermost first."""
    return getattr(_local, "stack", ())


def _noting(field: str) -> Callable[[object], None]:
    """A function noting what it is given into the list `field` of every recording open on this thread."""
    def note(value: object) -> None:
        for recording in active_recordings():
            getattr(recording, field).append(value)
    return note


note_launch, note_compile, note_segments, note_entry = map(_noting, ("launches", "compiles", "segments", "entries"))


def record_state() -> threading.local:
    """The thread-local whose `stack` attribute lists the active recorders (generated hot paths
    read it directly: a non-empty `__dict__.get("stack")` means something records)."""
    return _local


def recording() -> bool:
    return bool(getattr(_local, "stack", None))


def profiling() -> bool:
    return any(r.profile for r in active_recordings())


def dump_launch(launch: RecordedLaunch, block: object, slots: dict[str, int]) -> None:
    """`BRAZE_DUMP=launch_params` and `kernel_args` for a CPU launch outside a cached call: its index
    range and the threads it ran on, and the argument block slot by slot."""
    if config.dumping("launch_params"):
        config.dump("launch_params", f"{launch.kernel}.{launch.task}: [{launch.begin}, {launch.end}) over "
                                     f"{launch.chunks} chunk(s)")
    dump_kernel_args(launch, block, slots)


def dump_kernel_args(launch: RecordedLaunch, block: object, slots: dict[str, int]) -> None:
    """`BRAZE_DUMP=kernel_args`: a launch's argument block slot by slot (a parameter's name at its first)."""
    if config.dumping("kernel_args"):
        names = {slot: name for name, slot in slots.items()}
        lines = [f"  {n:3d} {int(value):#x}{'  ' + names[n] if n in names else ''}" for n, value in enumerate(block)]
        config.dump("kernel_args", f"{launch.kernel}.{launch.task}:\n" + "\n".join(lines))
