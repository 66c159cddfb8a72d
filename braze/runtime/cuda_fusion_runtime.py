"""A fusion's runtime on a GPU: the CPU runtime's host program, binding and argument packing, with
outputs made by the inputs' library on their device and the kernels launched on their stream.

After a run through the host program it also prepares the cached call (`fast_call.PreparedCall`)
for inputs of the same description, from what that run computed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from braze import config
from braze.errors import UnsupportedError
from braze.host.program import Alias, Allocate, CpuDevice, Frame
from braze.ir.tensor import TensorView
from braze.runtime import cuda_driver as cuda
from braze.runtime import device_arrays
from braze.runtime.cuda_kernel import CudaExecutor
from braze.runtime.fast_call import PreparedCall, PreparedLaunch, ScalarSlot, array_kind, buffer_pointer
from braze.runtime.fusion_runtime import FusionRuntime
from braze.runtime.inputs import BoundInputs
from braze.runtime.kernel_launch import scalar_packer
from braze.runtime.record import note_entry


class CudaDevice(CpuDevice):
    """GPU buffers from the inputs' library, kernels on the inputs' stream."""

    def allocate(self, frame: Frame, tv: TensorView, numel: int, sizes: list[int], strides: list[int],
                 zero: bool = False) -> object:
        bound = frame.bound
        view = device_arrays.allocate(bound.kind, tuple(sizes), tv.dtype, bound.device, bound.stream, tv.stride_order)
        if zero:
            cuda.fill_bytes(view.ptr, 0, view.size * view.itemsize, bound.stream)  # dense: stride orders only
        return view

    def launch(self, executor: CudaExecutor, block: np.ndarray, frame: Frame) -> None:
        executor.run(block, frame.bindings, frame.bound.stream)

    def copy_into(self, target: object, source: object) -> None:
        device_arrays.copy_into(target, source)


class CudaFusionRuntime(FusionRuntime):
    """Views of inputs (`evaluate`) are computed by a copy task here, not shared."""

    executor: CudaExecutor
    device_type = CudaDevice

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for tv in self.writes:
            # GPU buffers are laid out by stride order only: a split or merge layout would not
            # match the strides the kernel was compiled for.
            if not tv.has_default_allocation and tv.stride_order is None:
                raise UnsupportedError(f"allocation domain of {tv.describe()} "
                                       f"{TensorView.domain_text(tv.allocation)}: the CUDA backend lays outputs out "
                                       "by stride order only, not by splits and merges")

    def run_and_prepare(self, bound: BoundInputs, inputs: Sequence[object]) -> tuple[list, PreparedCall | None]:
        """Runs the host program, then prepares the cached call for inputs like `inputs` (None
        where the fast path does not cover the run)."""
        frame = self.new_frame(bound)
        results = self.program.run(frame)
        prepared = self._prepare(frame, inputs)
        note_entry(f"prepared call {self.executor.kernel.name}")
        return results, prepared

    def _prepare(self, frame: Frame, inputs: Sequence[object]) -> PreparedCall | None:
        bound = frame.bound
        kinds = [array_kind(value) for value in inputs]
        arrays = [n for n, tv in enumerate(self.fusion.inputs) if tv.scalar is None]
        if "poison_outputs" in config.current.enable or len(frame.launched) != 1 or not arrays \
                or any(kinds[n] is None for n in arrays):
            return None
        allocations, buffer_of = [], {}
        for instruction in self.program.instructions:
            if isinstance(instruction, Allocate):
                tv = instruction.tv
                buffer_of[instruction.slot] = len(allocations)
                allocations.append(device_arrays.allocator(bound.kind, instruction.sizes(frame), tv.dtype,
                                                           bound.device, bound.stream, tv.stride_order))
        written_slot = {id(i.tv): i.slot for i in self.program.instructions if isinstance(i, Allocate)}
        copies_back = self._copies_back(frame, buffer_of, kinds)
        returned = self._returned(buffer_of)
        if copies_back is None or returned is None:
            return None
        slot = self.layout.slots
        input_pointers = [(slot[p.name], self.input_position[tv_id], kinds[self.input_position[tv_id]].pointer)
                          for tv_id, p in self.params.arrays.items()]
        buffer_pointers = [(slot[p.name], buffer_of[written_slot[tv_id]]) for tv_id, p in self.params.writes.items()]
        scalars = [ScalarSlot(slot[p.name], self.input_position[tv_id], scalar_packer(p, checked=True))
                   for tv_id, p in self.params.scalars.items()]
        seeds = []
        for tv in self.random_ops:
            pair = self.params.seeds.get(id(tv))
            seeds.append(None if pair is None else (slot[pair[0].name], slot[pair[1].name]))
        first = arrays[0]  # the stream is the first array input's library's (as binding picks it)
        return PreparedCall(frame.launched[0].tolist(), allocations, input_pointers, buffer_pointers,
                            buffer_pointer(bound.kind), scalars, seeds, self._launches(frame), copies_back,
                            returned, kinds[first].stream, first, self.executor.device)

    def _launches(self, frame: Frame) -> list[PreparedLaunch]:
        launches = []
        name = self.executor.kernel.name
        for planned in self.executor.plan(frame.bindings, frame.bound.stream):
            scalars = (ctypes.c_int64 * 4)(*planned.scalars)
            params = (ctypes.c_void_p * 5)(0, *[ctypes.addressof(scalars) + 8 * n for n in range(4)])
            launches.append(PreparedLaunch(int(planned.task.function), planned.grid, self.executor.block,
                                           planned.shared, params, scalars,
                                           (name, planned.task.name, planned.begin, planned.end, planned.grid)))
        return launches

    def _copies_back(self, frame: Frame, buffer_of: dict[int, int], kinds: list) -> list[tuple] | None:
        """(input position, its pointer reader, buffer, bytes) of each in-place output; None when a
        layout differs."""
        copies = []
        for instruction in self.program.instructions:
            if isinstance(instruction, Alias) and instruction.view is None:
                target = frame.values[instruction.source]
                tv = instruction.out
                strides = device_arrays.dense_strides(target.shape, tv.dtype.itemsize, tv.stride_order)
                if tuple(strides) != tuple(target.strides) and target.size > 1:
                    return None
                nbytes = device_arrays.span_bytes(target.shape, target.strides, target.itemsize)
                copies.append((instruction.source, kinds[instruction.source].pointer, buffer_of[instruction.written],
                               nbytes))
        return copies

    def _returned(self, buffer_of: dict[int, int]) -> list[tuple[str, int]] | None:
        """Where each visible output comes from: a buffer, or an input written in place."""
        aliases = {i.slot: i for i in self.program.instructions if isinstance(i, Alias)}
        returned = []
        for out, slot in zip(self.fusion.outputs, self.program.outputs):
            if out.hidden:
                continue
            if slot in buffer_of:
                returned.append(("buffer", buffer_of[slot]))
            elif slot in aliases and aliases[slot].view is None:
                returned.append(("input", aliases[slot].source))
            else:
                return None
        return returned
