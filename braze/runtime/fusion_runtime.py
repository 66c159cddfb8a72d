"""FusionRuntime: everything needed to run one compiled fusion for one input signature.

Built once per signature. A run binds the inputs, allocates the written tensors, packs the
argument block from a prepared list of slot fillers, runs the kernel and hands back the outputs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from braze.codegen.llvm import ArgLayout
from braze.errors import InputError
from braze.ir.fusion import AliasKind, Fusion
from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.kir.params import KernelParams
from braze.ops.table import RefContext, lookup
from braze.runtime.device_arrays import DeviceView
from braze.runtime.executor import KernelExecutor
from braze.runtime.inputs import BoundInputs
from braze.runtime.rng import next_seed_offset

_NEEDS_VALUES = ("max", "min", "argmax", "argmin")


def allocate(shape: tuple[int, ...], dtype: np.dtype, stride_order: tuple[int, ...] | None) -> np.ndarray:
    """An uninitialized array of `shape` laid out in `stride_order` (row-major when None)."""
    if stride_order is None:
        return np.empty(shape, dtype)
    slow_to_fast = sorted(range(len(shape)), key=lambda i: -stride_order[i])
    storage = np.empty([shape[i] for i in slow_to_fast], dtype)
    return np.transpose(storage, np.argsort(slow_to_fast))


def _element_strides(array: np.ndarray) -> list[int]:
    return [s // array.itemsize for s in array.strides]


def _scalar_bits(value: object, param: k.ScalarParam) -> int:
    """The int64 slot holding a scalar parameter's value (floats by their bits)."""
    array = np.asarray(value, dtype=param.dtype.numpy).reshape(1)
    padded = np.zeros(8, np.uint8)
    padded[: array.itemsize] = array.view(np.uint8)
    return int(padded.view(np.int64)[0])


class FusionRuntime:
    """Runs one fusion for one input signature through one compiled kernel."""

    def __init__(self, fusion: Fusion, executor: KernelExecutor, writes: tuple[TensorView, ...],
                 params: KernelParams) -> None:
        self.fusion = fusion
        self.executor = executor
        self.writes = writes
        self.layout = ArgLayout.of(executor.kernel.params)
        self.input_position = {id(tv): i for i, tv in enumerate(fusion.inputs)}
        self.write_position = {id(tv): i for i, tv in enumerate(writes)}
        # Every unseeded random op draws a (seed, offset) per run, in definition order, as the
        # reference does, so both backends give the same numbers after bz.manual_seed.
        self.random_ops = [e.outputs[0] for e in fusion.exprs if e.op in ("rand", "randn") and e.attrs["seed"] is None]
        self.fillers = self._fillers(params)
        self.empty_checks = [(e.op, e.inputs[0], [e.inputs[0].visible[a].extent for a in e.attrs["axes"]], e.outputs[0])
                             for e in fusion.exprs if e.op in _NEEDS_VALUES]

    def _fillers(self, params: KernelParams) -> list[Callable]:
        """Functions (block, run state) that write each parameter's slots."""
        slot = self.layout.slots
        fillers = []
        for tv_id, p in params.arrays.items():
            where = self.input_position[tv_id]
            fillers.append(lambda b, s, at=slot[p.name], w=where: self._pack_array(b, at, s.arrays[w]))
        for tv_id, p in params.writes.items():
            where = self.write_position[tv_id]
            fillers.append(lambda b, s, at=slot[p.name], w=where: self._pack_array(b, at, s.buffers[w]))
        for tv_id, p in params.scalars.items():
            where = self.input_position[tv_id]
            fillers.append(lambda b, s, at=slot[p.name], w=where, p=p: b.__setitem__(at, _scalar_bits(s.arrays[w], p)))
        for name, p in params.symbols.items():
            fillers.append(lambda b, s, at=slot[p.name], name=name: b.__setitem__(at, s.bindings[name]))
        draws = {id(tv): n for n, tv in enumerate(self.random_ops)}
        for tv_id, pair in params.seeds.items():
            for part, p in enumerate(pair):
                fillers.append(lambda b, s, at=slot[p.name], n=draws[tv_id], part=part:
                               b.__setitem__(at, np.uint64(s.rng[n][part]).astype(np.int64)))
        return fillers

    @staticmethod
    def _pack_array(block: np.ndarray, slot: int, array) -> None:
        block[slot] = array.ptr if isinstance(array, DeviceView) else array.ctypes.data
        n = array.ndim
        block[slot + 1 : slot + 1 + n] = array.shape
        block[slot + 1 + n : slot + 1 + 2 * n] = _element_strides(array)

    # --- a run ------------------------------------------------------------------------------------
    def run(self, bound: BoundInputs) -> list[np.ndarray]:
        self._check_empty_reductions(bound.bindings)  # before anything is allocated or drawn
        state = self._new_state(bound)
        block = np.zeros(self.layout.size, np.int64)
        for fill in self.fillers:
            fill(block, state)
        self._launch(block, state)
        return [self._output(out, state) for out in self.fusion.outputs]

    def _new_state(self, bound: BoundInputs) -> _RunState:
        state = _RunState(bound, self)
        state.buffers = [allocate(state.context.shape(tv.logical), tv.dtype.numpy, tv.stride_order)
                         for tv in self.writes]
        return state

    def _launch(self, block: np.ndarray, state: _RunState) -> None:
        self.executor.run(block, state.bindings)

    def _check_empty_reductions(self, bindings: dict[str, int]) -> None:
        for op, x, extents, out in self.empty_checks:
            if any(e.evaluate(bindings) == 0 for e in extents) and all(
                    d.extent.evaluate(bindings) for d in out.visible):
                raise InputError(f"{op}: {x.describe()} has an empty dimension among the reduced axes")

    def _output(self, out, state: _RunState) -> np.ndarray:
        if out.alias is AliasKind.EVALUATE:
            return self._view(out.tv, state)
        value = state.buffers[self.write_position[id(out.tv)]]
        if out.alias is AliasKind.REUSE_BUFFER:
            target = state.arrays[self.input_position[id(out.aliased_input)]]
            np.copyto(target, value)
            return target
        return value

    def _view(self, tv: TensorView, state: _RunState) -> np.ndarray:
        """An `evaluate` output: the view ops' reference rules applied to the input, on the host."""
        if tv.definition is None:
            return state.arrays[self.input_position[id(tv)]]
        args = [self._view(inp, state) for inp in tv.definition.inputs]
        return lookup(tv.definition.op).reference(state.context, args, tv, tv.definition.attrs)


class _RunState:
    """What one run binds: arrays, extents, random streams and the buffers it allocates."""

    def __init__(self, bound: BoundInputs, runtime: FusionRuntime) -> None:
        self.arrays = [a if isinstance(a, DeviceView) else _addressable(a) for a in bound.arrays]
        self.bindings = bound.bindings
        self.stream = bound.stream
        self.rng = [next_seed_offset() for _ in runtime.random_ops]
        self.context = RefContext(bound.bindings, next_seed_offset)
        self.buffers: list = []  # the written tensors, allocated by the runtime


def _addressable(array: np.ndarray) -> np.ndarray:
    """Arrays whose strides are not whole elements (views into records) are copied first."""
    if all(s % array.itemsize == 0 for s in array.strides) or array.ndim == 0:
        return array
    return np.ascontiguousarray(array)
