"""FusionRuntime: everything needed to run one compiled fusion for one input signature.

Built once per signature, as a `HostProgram`: allocate the written tensors (sized by the compiled
shape function), launch the kernel on an argument block packed by a prepared list of slot
fillers, free the intermediates, alias the outputs that are inputs. A run binds the inputs and
runs the program.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from braze import config
from braze.codegen.llvm import ArgLayout
from braze.errors import InputError
from braze.host.program import CpuDevice, Frame, Launch, OutputSpec, single_kernel_program
from braze.ir.fusion import AliasKind, Fusion, Output
from braze.ir.tensor import TensorView
from braze.kir import nodes as k
from braze.kir.params import KernelParams
from braze.ops.table import RefContext, lookup
from braze.runtime.device_arrays import DeviceView
from braze.runtime.executor import KernelExecutor
from braze.runtime.inputs import BoundInputs
from braze.runtime.rng import next_seed_offset

_NEEDS_VALUES = ("max", "min", "argmax", "argmin")


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

    device_type: type[CpuDevice] = CpuDevice  # a GPU runtime allocates and launches on its device

    def __init__(self, fusion: Fusion, executor: KernelExecutor, writes: tuple[TensorView, ...],
                 params: KernelParams) -> None:
        self.fusion = fusion
        self.executor = executor
        self.writes = writes
        self.params = params
        self.layout = ArgLayout.of(executor.kernel.params)
        self.input_position = {id(tv): i for i, tv in enumerate(fusion.inputs)}
        # Every unseeded random op draws a (seed, offset) per run, in definition order, as the
        # reference does, so both backends give the same numbers after bz.manual_seed.
        self.random_ops = [e.outputs[0] for e in fusion.exprs if e.op in ("rand", "randn") and e.attrs["seed"] is None]
        checked = [e for e in fusion.exprs if e.op in _NEEDS_VALUES]
        # Extents of the reduced axes and of the result: the shape function computes them too.
        extents = [([e.inputs[0].visible[a].extent for a in e.attrs["axes"]], e.outputs[0].shape) for e in checked]
        self.device = self.device_type()
        self.program = single_kernel_program(executor.kernel.name, fusion.inputs, writes,
                                             lambda written: self._launch(params, written),
                                             [self._output_spec(out) for out in fusion.outputs],
                                             [x for reduced, result in extents for x in (*reduced, *result)],
                                             self.device)
        self.empty_checks = []
        at = self.program.extra_at
        for e, (reduced, result) in zip(checked, extents):
            self.empty_checks.append((e.op, e.inputs[0], range(at, at + len(reduced)),
                                      range(at + len(reduced), at + len(reduced) + len(result))))
            at += len(reduced) + len(result)
        if config.dumping("host_program"):
            config.dump("host_program", str(self.program))

    def _output_spec(self, out: Output) -> OutputSpec:
        if out.alias is AliasKind.REUSE_BUFFER:
            return OutputSpec(out.tv, out.aliased_input, None)
        if out.alias is AliasKind.EVALUATE and not any(tv is out.tv for tv in self.writes):  # else a copy task wrote it
            view = lambda frame, tv=out.tv: self._view(tv, frame)
            return OutputSpec(out.tv, out.aliased_input, _view_ops(out.tv), view)
        return OutputSpec(out.tv, None, None)

    def _launch(self, params: KernelParams, written: dict[int, int]) -> Launch:
        fillers = self._fillers(params, written)
        size = self.layout.size

        def pack(frame: Frame) -> np.ndarray:
            block = np.zeros(size, np.int64)
            for fill in fillers:
                fill(block, frame)
            return block

        ins = tuple(tv for tv in self.fusion.inputs if id(tv) in params.arrays or id(tv) in params.scalars)
        return Launch(self.executor, ins, tuple(self.writes), pack, self.device)

    def _fillers(self, params: KernelParams, written: dict[int, int]) -> list[Callable]:
        """Functions (block, frame) that write each parameter's slots; `written`: the written tensors' frame slots."""
        slot = self.layout.slots
        fillers = []
        for tv_id, p in params.arrays.items():
            where = self.input_position[tv_id]  # inputs sit in the first frame slots, in order
            fillers.append(lambda b, f, at=slot[p.name], w=where: self._pack_array(b, at, f.values[w]))
        for tv_id, p in params.writes.items():
            fillers.append(lambda b, f, at=slot[p.name], w=written[tv_id]: self._pack_array(b, at, f.values[w]))
        for tv_id, p in params.scalars.items():
            where = self.input_position[tv_id]
            fillers.append(lambda b, f, at=slot[p.name], w=where, p=p: b.__setitem__(at, _scalar_bits(f.values[w], p)))
        for name, p in params.symbols.items():
            fillers.append(lambda b, f, at=slot[p.name], name=name: b.__setitem__(at, f.bindings[name]))
        draws = {id(tv): n for n, tv in enumerate(self.random_ops)}
        for tv_id, pair in params.seeds.items():
            for part, p in enumerate(pair):
                fillers.append(lambda b, f, at=slot[p.name], n=draws[tv_id], part=part:
                               b.__setitem__(at, np.uint64(f.rng[n][part]).astype(np.int64)))
        return fillers

    @staticmethod
    def _pack_array(block: np.ndarray, slot: int, array) -> None:
        block[slot] = array.ptr if isinstance(array, DeviceView) else array.ctypes.data
        n = array.ndim
        block[slot + 1 : slot + 1 + n] = array.shape
        block[slot + 1 + n : slot + 1 + 2 * n] = _element_strides(array)

    # --- a run ------------------------------------------------------------------------------------
    def run(self, bound: BoundInputs) -> list[np.ndarray]:
        return self.program.run(self.new_frame(bound))

    def new_frame(self, bound: BoundInputs) -> Frame:
        """A run's frame: the inputs bound, every buffer sized, the random draws made."""
        arrays = [a if isinstance(a, DeviceView) else _addressable(a) for a in bound.arrays]
        frame = self.program.new_frame(arrays, bound.bindings)
        self._check_empty_reductions(frame.extents)  # before anything is allocated or drawn
        frame.bound = bound
        frame.rng = [next_seed_offset() for _ in self.random_ops]
        frame.context = RefContext(bound.bindings, next_seed_offset)
        return frame

    def _check_empty_reductions(self, extents: list[int]) -> None:
        """max, min, argmax and argmin of nothing are undefined, unless the result is empty too."""
        for op, x, reduced, result in self.empty_checks:
            if any(extents[i] == 0 for i in reduced) and all(extents[i] for i in result):
                raise InputError(f"{op}: {x.describe()} has an empty dimension among the reduced axes")

    def _view(self, tv: TensorView, frame: Frame) -> np.ndarray:
        """An `evaluate` output: the view ops' reference rules applied to the input, on the host."""
        if tv.definition is None:
            return frame.values[self.input_position[id(tv)]]
        args = [self._view(inp, frame) for inp in tv.definition.inputs]
        return lookup(tv.definition.op).reference(frame.context, args, tv, tv.definition.attrs)


def _view_ops(tv: TensorView) -> tuple[str, ...]:
    """The view ops from an input to `tv`, first applied first."""
    ops = []
    while tv.definition is not None:
        ops.append(tv.definition.op)
        tv = tv.definition.inputs[0]
    return tuple(reversed(ops))


def _addressable(array: np.ndarray) -> np.ndarray:
    """Arrays whose strides are not whole elements (views into records) are copied first."""
    if all(s % array.itemsize == 0 for s in array.strides) or array.ndim == 0:
        return array
    return np.ascontiguousarray(array)
