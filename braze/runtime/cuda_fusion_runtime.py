"""A fusion's runtime on a GPU: the CPU runtime's binding and argument packing, with outputs made
by the inputs' library on their device and the kernels launched on their stream."""

from __future__ import annotations

import numpy as np

from braze.ir.fusion import AliasKind
from braze.runtime import device_arrays
from braze.runtime.cuda_kernel import CudaExecutor
from braze.runtime.fusion_runtime import FusionRuntime, _RunState
from braze.runtime.inputs import BoundInputs


class CudaFusionRuntime(FusionRuntime):
    """Views of inputs (`evaluate`) are computed by a copy task here, not shared."""

    executor: CudaExecutor

    def _new_state(self, bound: BoundInputs) -> _RunState:
        state = _RunState(bound, self)
        state.buffers = [device_arrays.allocate(bound.kind, state.context.shape(tv.logical), tv.dtype, bound.device,
                                                bound.stream, tv.stride_order)
                         for tv in self.writes]
        return state

    def _launch(self, block: np.ndarray, state: _RunState) -> None:
        self.executor.run(block, state.bindings, state.stream)

    def _output(self, out, state: _RunState):
        value = state.buffers[self.write_position[id(out.tv)]]
        if out.alias is AliasKind.REUSE_BUFFER:
            target = state.arrays[self.input_position[id(out.aliased_input)]]
            device_arrays.copy_into(target, value)
            return target
        return value
