"""A fusion's runtime on a GPU: the CPU runtime's host program, binding and argument packing, with
outputs made by the inputs' library on their device and the kernels launched on their stream.

After a run through the host program it also prepares the cached call (`fast_call.PreparedCall`)
for inputs of the same description, from what that run computed.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

import numpy as np

from braze import config
from braze.host.program import Alias, Allocate, CpuDevice, Frame
from braze.ir.tensor import TensorView
from braze.runtime import cuda_driver as cuda
from braze.runtime import device_arrays
from braze.runtime.backends.cuda import CudaPreparedCall
from braze.runtime.cuda_kernel import CudaExecutor
from braze.runtime.fast_call import CallPlan, PreparedLaunch
from braze.runtime.fusion_runtime import FusionRuntime
from braze.runtime.graph import capture_stream
from braze.runtime.record import recording


class CudaDevice(CpuDevice):
    """GPU buffers from the inputs' library, kernels on the inputs' stream."""

    def allocate(self, frame: Frame, tv: TensorView, numel: int, sizes: list[int], strides: list[int],
                 zero: bool = False) -> object:
        bound = frame.bound
        if _laid_out_by_domain(tv):
            view = device_arrays.allocate_strided(bound.kind, numel, tuple(sizes), tuple(strides), tv.dtype,
                                                  bound.device, bound.stream)
            nbytes = numel * tv.dtype.itemsize
        else:
            view = device_arrays.allocate(bound.kind, tuple(sizes), tv.dtype, bound.device, bound.stream,
                                          tv.stride_order)
            nbytes = view.size * view.itemsize  # dense: stride orders only
        if zero:  # in stream order with the launches: a graph replays it with them
            cuda.fill_bytes(view.ptr, 0, nbytes, _launch_stream(bound, (view,), f"buffer {tv.name}"))
        return view

    def launch(self, executor: CudaExecutor, block: np.ndarray, frame: Frame) -> None:
        executor.run(block, frame.bindings, frame.bound.stream, [v for v in frame.values if v is not None])

    def copy_into(self, target: object, source: object) -> None:
        device_arrays.copy_into(target, source, lambda stream: capture_stream(
            stream, cuda.device(target.device), (target, source), "an output written back into its input"))


def prepared_launches(executor: CudaExecutor, bindings: dict[str, int], stream: int) -> list[PreparedLaunch]:
    """The launches of `executor`'s tasks for the extents in `bindings` on `stream`, each with its
    parameters (the argument block's address, set by the prepared call, then its launch scalars)."""
    workspace = executor.workspace(stream, bindings)
    launches = []
    for planned in executor.plan(bindings, workspace):
        scalars = (ctypes.c_int64 * 4)(*planned.scalars)
        params = (ctypes.c_void_p * 5)(0, *[ctypes.addressof(scalars) + 8 * n for n in range(4)])
        launches.append(PreparedLaunch(int(planned.function), planned.grid, executor.block, planned.shared, params,
                                       scalars, (executor.kernel.name, planned.function_name, planned.begin,
                                                 planned.end, planned.grid), workspace))
    return launches


def _launch_stream(bound: object, keep: tuple, what: str) -> int:
    """The stream the inputs' work goes to: theirs, or an open `bz.graph()`'s capture stream."""
    return capture_stream(bound.stream, cuda.device(bound.device), keep, what) if recording() else bound.stream


def _laid_out_by_domain(tv: TensorView) -> bool:
    """An allocation domain of splits and merges: the host program's sizes and strides lay it out
    (a plain stride order is a dense layout the array libraries make themselves)."""
    return not tv.has_default_allocation and tv.stride_order is None


class CudaFusionRuntime(FusionRuntime):
    """Views of inputs (`evaluate`) are computed by a copy task here, not shared."""

    executor: CudaExecutor
    device_type = CudaDevice

    def _can_prepare(self, frame: Frame, kinds: list) -> bool:
        return not config.enabled("poison_outputs")

    def _allocator(self, frame: Frame, instruction: Allocate) -> Callable[[], object]:
        bound, tv = frame.bound, instruction.tv
        if _laid_out_by_domain(tv):
            numel, sizes, strides = instruction.extents(frame)
            return device_arrays.strided_allocator(bound.kind, numel, tuple(sizes), tuple(strides), tv.dtype,
                                                   bound.device, bound.stream)
        return device_arrays.allocator(bound.kind, instruction.sizes(frame), tv.dtype, bound.device, bound.stream,
                                       tv.stride_order)

    def _prepared_call(self, frame: Frame, plan: CallPlan, kinds: list, first_array: int) -> CudaPreparedCall:
        # The stream is the first array input's library's, as binding picks it. Grid reductions take
        # the workspace of the stream they run on: such a call's launches are made again per stream.
        stream, executor = frame.bound.stream, self.executor
        per_stream = functools.partial(prepared_launches, executor, dict(frame.bindings)) \
            if executor.workspaces is not None else None
        return CudaPreparedCall(plan, prepared_launches(executor, frame.bindings, stream), kinds[first_array],
                                first_array, executor.device, stream, per_stream, executor.pairs)

    def _copies_back(self, frame: Frame, buffer_of: dict[int, int], kinds: list) -> list[tuple] | None:
        """(input position, its pointer reader, buffer, bytes) of each in-place output; None when a
        layout differs."""
        copies = []
        for instruction in self.program.instructions:
            if isinstance(instruction, Alias) and instruction.view is None:
                target, tv = frame.values[instruction.source], instruction.out
                strides = device_arrays.dense_strides(target.shape, tv.dtype.itemsize, tv.stride_order)
                if tuple(strides) != tuple(target.strides) and target.size > 1:
                    return None
                nbytes = device_arrays.span_bytes(target.shape, target.strides, target.itemsize)
                copies.append((instruction.source, kinds[instruction.source].pointer, buffer_of[instruction.written],
                               nbytes))
        return copies
