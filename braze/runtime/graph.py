"""`bz.graph()`: the launches of a `with` body, recorded once and replayed without Python dispatch.

    with bz.graph() as g:
        step(x, v, 1e-3)        # runs as usual, and is recorded
    for _ in range(1000):
        g.replay()              # the same launches again, on the same arrays with the same scalars

A graph is a `bz.record()` recording (its `launches` list what it holds) that also keeps, for every
launch of a fusion or a loop kernel in the body, what running it again takes:

- on the host, each task's native function and index range and a copy of its argument block (the
  arrays' pointers, extents and strides and the scalars as they were), in launch order; `replay`
  calls them in a loop, with no binding, lookup or packing;
- on a GPU, the launches go into one CUDA graph by stream capture: they are queued on a stream
  braze owns while its capture is open, the graph is instantiated when the body ends and launched
  once then (so the body's results are there after it, as on the host), and `replay` is one
  cuGraphLaunch on the stream the body's first launch was made for (torch's current stream, say).

Replay reads and writes the buffers of the recording, as `torch.cuda.graph` does: change the
inputs' contents in place between replays; new arrays or new scalar values need a new graph. The
graph keeps every array and buffer it launches on alive. On a GPU only braze's launches are in the
graph: other work in the body (a torch op) runs when it is called, before the recorded launches. A
replay in another graph's body is recorded there like any launch (a GPU graph's is refused there).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from braze.compile import cuda_driver as cuda
from braze.errors import Error, UnsupportedError
from braze.record import Recording, active_recordings, profiling, push_recording
from braze.runtime.thread_pool import parallel_for

# A host step: (function, begin, end, argument block address, work per index or None to run the
# range on the calling thread, the least work per chunk).
HostStep = tuple[Callable, int, int, int, "int | None", int]


class Graph(Recording):
    """The launches recorded by `bz.graph()`, and `replay` to run them again."""

    captures = True

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[HostStep] = []  # the host's launches and copies, in order
        self.kept: list[object] = []  # what the steps and the GPU graph point into
        self.capture: _Capture | None = None  # the GPU capture (open while the body runs)
        self.state = "recording"  # then "ready", or "failed" when the body raised

    @property
    def gpu_nodes(self) -> int:
        """How many nodes (launches, fills, copies) the GPU graph holds; 0 without one."""
        return self.capture.nodes if self.capture is not None else 0

    def replay(self) -> None:
        """Runs the recorded launches again, in order: the host's on this thread (and the CPU
        pool), the GPU's as one graph launch on the recorded stream."""
        if self.state != "ready":
            raise Error("bz.graph: nothing to replay: " + ("the graph's `with` body has not ended yet"
                                                           if self.state == "recording" else "its body raised"))
        self._add_to_open_graphs()
        for fn, begin, end, address, work, min_work in self.steps:
            if work is None:
                fn(begin, end, address)
            else:
                parallel_for(fn, begin, end, address, work, min_work)
        if self.capture is not None:
            self.capture.launch()

    def _add_to_open_graphs(self) -> None:
        """A replay in another graph's body is one of that body's launches: the graphs open on this
        thread take its host steps (and keep this graph, which keeps what they point into). Its GPU
        graph cannot be launched into their capture."""
        outer = open_graphs()
        if not outer:
            return
        if self.capture is not None:
            raise UnsupportedError("bz.graph: a graph of GPU launches cannot be replayed in another graph's body, "
                                   "which would not hold them: replay it before or after that body")
        for g in outer:
            g.steps += self.steps
            g.kept.append(self)

    def _finish(self, failed: bool) -> None:
        capture = self.capture
        if capture is not None:
            capture.end(failed)
        self.state = "failed" if failed else "ready"
        if not failed and capture is not None:
            capture.launch()  # the body's own run on the GPU: the capture queued nothing


@contextmanager
def graph() -> Iterator[Graph]:
    """Records every launch of fusions and loop kernels in the `with` body on this thread, which runs
    as usual; the graph's `replay()` runs them again on the same arrays (see this module's doc).
    Kernels with debug checks, fusions that draw unseeded random numbers and `bz.record(profile=True)`
    around GPU launches cannot be recorded (an UnsupportedError says which)."""
    recorded = Graph()
    failed = True
    with push_recording(recorded):
        try:
            yield recorded
            failed = False
        finally:
            recorded._finish(failed)


def open_graphs() -> list[Graph]:
    """The graphs recording on this thread, outermost first."""
    return [r for r in active_recordings() if isinstance(r, Graph)]


# --- the host ---------------------------------------------------------------------------------------
def host_block(block: object, keep: Sequence[object], what: str, debug: bool = False) -> int | None:
    """Where the host tasks of one call read their arguments in a replay: a copy of `block` (an int64
    array or ctypes array, complete with scalars) that the open graphs keep, with `keep` (the arrays
    its pointers point into). None when no graph is open."""
    graphs = open_graphs()
    if not graphs:
        return None
    if debug:
        raise _debug_refused(what)
    snapshot = np.array(np.frombuffer(block, np.int64) if not isinstance(block, np.ndarray) else block,
                        dtype=np.int64, copy=True)
    for g in graphs:
        g.kept += (snapshot, *keep)
    return snapshot.ctypes.data


def host_task(fn: Callable, begin: int, end: int, address: int, work: int, min_work: int, chunks: int) -> None:
    """Adds one host task launch to the open graphs (`address`: `host_block`'s answer); `chunks` 1:
    it ran on the calling thread and replays there."""
    if end <= begin:
        return
    step = (fn, begin, end, address, None if chunks == 1 else work, min_work)
    for g in open_graphs():
        g.steps.append(step)


def host_copy(target: np.ndarray, source: np.ndarray) -> None:
    """Adds the copy of `source` into `target` (an output written back into its input) to the open graphs."""
    graphs = open_graphs()
    if graphs:
        step = (lambda begin, end, address: np.copyto(target, source), 0, 1, 0, None, 0)  # (it keeps both)
        for g in graphs:
            g.steps.append(step)


def refuse_random(what: str) -> None:
    """Raises where a graph is open: `what` draws new random numbers each call, a replay would not."""
    if open_graphs():
        raise UnsupportedError(f"bz.graph: {what} draws random numbers from braze's generator at every call, and "
                               "a replay would draw the same ones again: give its random ops a seed input, or "
                               "call it outside the graph")


def _debug_refused(what: str) -> UnsupportedError:
    return UnsupportedError(f"bz.graph: {what} has debug checks (debug=True or BRAZE_DEBUG=1), which are read "
                            "back after every task and cannot be part of a graph: record it without them")


# --- a GPU --------------------------------------------------------------------------------------------
def capture_stream(stream: int, device: cuda.Device, keep: Sequence[object], what: str,
                   debug: bool = False) -> int:
    """The stream a GPU launch meant for `stream` goes to: while a graph records on this thread, its
    capture stream (opened at its first GPU launch), and the graph keeps `keep` (the arrays and
    buffers the launch reads and writes) alive; else `stream` itself."""
    graphs = open_graphs()
    if not graphs:
        return stream
    if debug:
        raise _debug_refused(what)
    if profiling():
        raise UnsupportedError("bz.graph: bz.record(profile=True) waits for each GPU kernel, which a graph being "
                               "captured cannot do: profile outside the graph")
    if len(graphs) > 1:
        raise UnsupportedError("bz.graph: graphs nested in one another can hold host launches only; "
                               f"{what} runs on cuda:{device.index}")
    recorded = graphs[0]
    if recorded.capture is None:
        recorded.capture = _Capture(device, stream)
    recorded.kept += keep
    return recorded.capture.stream_for(stream, device, what)


class _Capture:
    """The CUDA graph a `bz.graph()` records its GPU launches into: a braze-owned stream under
    capture while the body runs, then the executable graph and the stream it is launched on."""

    def __init__(self, device: cuda.Device, origin: int) -> None:
        self.device, self.origin = device, origin
        self.exec: int | None = None
        self.nodes = 0
        with device.current():
            self.stream = cuda.create_stream()
            try:
                cuda.begin_capture(self.stream)
            except Exception:
                cuda.destroy_stream(self.stream)
                raise

    def stream_for(self, stream: int, device: cuda.Device, what: str) -> int:
        if device is not self.device:
            raise UnsupportedError(f"bz.graph: {what} runs on cuda:{device.index}, the graph's launches on "
                                   f"cuda:{self.device.index}: a graph holds the launches of one GPU")
        if stream != self.origin:
            raise UnsupportedError(f"bz.graph: {what} runs on stream {stream:#x}, the graph's first launch on "
                                   f"{self.origin:#x}: a graph replays on one stream")
        return self.stream

    def end(self, failed: bool) -> None:
        """Closes the capture; unless the body failed, makes the executable graph."""
        with self.device.current():
            try:
                captured = cuda.end_capture(self.stream)
            finally:
                cuda.destroy_stream(self.stream)
            try:
                if not failed:
                    self.nodes = cuda.graph_nodes(captured)
                    self.exec = cuda.instantiate_graph(captured)
                    weakref.finalize(self, cuda.destroy_graph_exec, self.exec)
            finally:
                cuda.destroy_graph(captured)

    def launch(self) -> None:
        with self.device.current():
            cuda.launch_graph(self.exec, self.origin)
