"""A fusion's runtime on a GPU: the CPU runtime's host program, binding and argument packing, with
outputs made by the inputs' library on their device and the kernels launched on their stream."""

from __future__ import annotations

import numpy as np

from braze.errors import UnsupportedError
from braze.host.program import CpuDevice, Frame
from braze.ir.tensor import TensorView
from braze.runtime import cuda_driver as cuda
from braze.runtime import device_arrays
from braze.runtime.cuda_kernel import CudaExecutor
from braze.runtime.fusion_runtime import FusionRuntime


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
