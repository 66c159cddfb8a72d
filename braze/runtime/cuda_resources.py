"""What braze holds on a GPU besides the arrays it returns, and when it gives it back: the grid
reductions' workspaces, one per stream (the loaded modules of compiled kernels: compile/cuda_driver.py).

Launches on one stream run one after another, so every kernel launched on a stream can share one
workspace; launches on two streams may run at once, so each stream has its own. A device keeps the
workspaces of its STREAM_WORKSPACES most recently used streams (one grown when a kernel needs more
room); one dropped from there lives on while a prepared call or a `bz.graph()` still launches into it,
and is then freed in order on its own stream. A CuPy stream is destroyed with its object, so the
workspace keeps that object: the stream outlives the free queued on it.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from collections import OrderedDict

from braze.compile import cuda_driver as cuda
from braze.errors import CudaError

STREAM_WORKSPACES = 64  # workspaces a device keeps, by stream (beyond: the least recently used goes)
_ALIGNMENT = 256  # the partial results start on a boundary every access width meets

_log = logging.getLogger(__name__)


class Workspace:
    """Device memory of one stream: the finished-block counters (zeroed when made; the last block of
    a group to finish combines the group's partial results and resets its counter), room for
    `partial_bytes` of grid reductions' partial results, then `pair_bytes` for inner-outer pairs.
    `pointers` is what the kernels take: (partials, counters); `pair_pointer` the pairs' region.

    A grid reduction is one launch, so stream order alone keeps two calls' partial results apart.
    An inner-outer pair is two launches, the second reading what the first left: a call enqueues
    both under `pair_lock`, so no other pair's launches come between them on the stream, and the
    pairs' region is its own, so no grid reduction's either."""

    def __init__(self, device: cuda.Device, stream: int, partial_bytes: int, counter_bytes: int,
                 pair_bytes: int = 0) -> None:
        counters = -(-counter_bytes // _ALIGNMENT) * _ALIGNMENT
        partials = -(-partial_bytes // _ALIGNMENT) * _ALIGNMENT
        with device.current():
            address = cuda.alloc(counters + partials + pair_bytes, stream)
            cuda.fill_bytes(address, 0, counter_bytes, stream)
        self.partial_bytes, self.pair_bytes = partial_bytes, pair_bytes
        self.pointers = (address + counters, address)
        self.pair_pointer = address + counters + partials
        self.pair_lock = threading.Lock()
        free = weakref.finalize(self, _free_workspace, device, address, stream, _stream_owner(stream))
        free.atexit = False  # the context's teardown frees it


def _free_workspace(device: cuda.Device, address: int, stream: int, owner: object) -> None:
    """Frees in order on the workspace's stream, which `owner` (kept until now) keeps valid."""
    if sys.is_finalizing():
        return
    try:
        with device.current():
            cuda.free(address, stream)
    except CudaError as error:  # a context torn down already: its memory went with it
        _log.debug("workspace at %#x not freed: %s", address, error)


def _stream_owner(stream: int) -> object:
    """The object whose life keeps `stream` valid, where braze can tell: CuPy's current stream
    object when `stream` is its handle (CuPy destroys a stream with its object). None for torch,
    whose streams come from a pool it never destroys, and for streams a user passes by handle."""
    cupy = sys.modules.get("cupy")
    if cupy is None or not stream:
        return None
    try:
        current = cupy.cuda.get_current_stream()
    except Exception:  # noqa: BLE001  (no CUDA in CuPy: not its stream)
        return None
    return current if current.ptr == stream else None


class StreamWorkspaces:
    """One device's workspaces by stream, the most recently used last."""

    def __init__(self, device: cuda.Device, counter_bytes: int) -> None:
        self.device, self.counter_bytes = device, counter_bytes
        self.by_stream: OrderedDict[int, Workspace] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, stream: int, partial_bytes: int, pair_bytes: int = 0) -> Workspace:
        """The workspace of `stream`, with room for at least `partial_bytes` of grid reductions'
        partial results and `pair_bytes` of inner-outer pairs'."""
        with self.lock:
            workspace = self.by_stream.get(stream)
            if workspace is None or workspace.partial_bytes < partial_bytes or workspace.pair_bytes < pair_bytes:
                # A larger one replaces a smaller: calls prepared with the smaller keep it, on the same stream.
                if workspace is not None:
                    partial_bytes = max(partial_bytes, workspace.partial_bytes)
                    pair_bytes = max(pair_bytes, workspace.pair_bytes)
                workspace = self.by_stream[stream] = Workspace(self.device, stream, partial_bytes,
                                                               self.counter_bytes, pair_bytes)
            self.by_stream.move_to_end(stream)
            while len(self.by_stream) > STREAM_WORKSPACES:
                self.by_stream.popitem(last=False)
            return workspace


_workspaces: dict[tuple[int, int], StreamWorkspaces] = {}
_workspaces_lock = threading.Lock()


def stream_workspaces(device: cuda.Device, counter_bytes: int) -> StreamWorkspaces:
    """The workspaces of `device` whose counters take `counter_bytes` (the same for every kernel of
    a device: a counter per block it runs at once)."""
    with _workspaces_lock:
        key = (device.index, counter_bytes)
        if key not in _workspaces:
            _workspaces[key] = StreamWorkspaces(device, counter_bytes)
        return _workspaces[key]
