"""FusionRuntime: everything needed to run one compiled fusion for one input signature.

Built once per signature, as a `HostProgram`: allocate the written tensors (sized by the compiled
shape function), launch the kernel on an argument block packed by a prepared list of slot
fillers, free the intermediates, alias the outputs that are inputs. A run binds the inputs and
runs the program.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence

import numpy as np

from braze import config
from braze.errors import InputError, UnsupportedError
from braze.host.program import (
    Alias,
    Allocate,
    CpuDevice,
    Frame,
    Launch,
    OutputSpec,
    single_kernel_program,
)
from braze.ir.fusion import AliasKind, Expr, FusionGraph, Output
from braze.ir.tensor import TensorView
from braze.kir.layout import ArgLayout
from braze.kir.params import KernelParams
from braze.ops.creation import draws_from_the_global_generator
from braze.ops.reductions import check_empty_reductions, reductions_without_identity
from braze.ops.table import RefContext, lookup
from braze.record import note_entry
from braze.runtime.arrays import pack_array
from braze.runtime.backends.cpu import HostDevice, KernelExecutor
from braze.runtime.device_arrays import DeviceView
from braze.runtime.fast_call import (
    CallPlan,
    PreparedCall,
    ScalarSlot,
    array_kind,
    buffer_pointer,
)
from braze.runtime.graph import open_graphs, refuse_random
from braze.runtime.inputs import BoundInputs, input_label
from braze.runtime.rng import next_seed_offset
from braze.runtime.scalars import scalar_bits, scalar_packer


class FusionRuntime:
    """Runs one fusion for one input signature through one compiled kernel, on its backend's device
    (`device`: where buffers live, kernels run and the cached call launches)."""

    def __init__(self, fusion: FusionGraph, executor: KernelExecutor, writes: tuple[TensorView, ...],
                 params: KernelParams, in_place: frozenset[int] = frozenset(), device: CpuDevice | None = None
                 ) -> None:
        """`in_place`: the `reuse_buffer` outputs (ids of their tensors) the kernel may write straight
        into their input (`schedule.in_place_outputs`); the others are written back after the launch.
        `device`: by default the host's (runtime/backends/cpu.py)."""
        # Held weakly: the fusion owns its runtimes (engine.FusionCache), and runs them only while it lives.
        self._fusion = weakref.ref(fusion)
        self.in_place = in_place
        self.executor = executor
        self.writes = writes
        self.params = params
        self.layout = ArgLayout.of(executor.kernel.params)
        self.input_position = {id(tv): i for i, tv in enumerate(fusion.inputs)}
        # Every unseeded random op draws a (seed, offset) per run, in definition order, as the
        # reference does, so both backends give the same numbers after bz.manual_seed.
        self.random_ops = [e.outputs[0] for e in fusion.exprs if draws_from_the_global_generator(e)]
        checked = reductions_without_identity(fusion)
        # Extents of the reduced axes: the shape function computes them too.
        extents = [[e.inputs[0].visible[a].extent for a in e.attrs["axes"]] for e in checked]
        self.device = device or HostDevice()
        self.program = single_kernel_program(executor.kernel.name, fusion.inputs, writes,
                                             lambda written: self._launch(params, written),
                                             [self._output_spec(out) for out in fusion.outputs],
                                             [x for reduced in extents for x in reduced],
                                             self.device)
        self.empty_checks: list[tuple[Expr, range]] = []  # (reduction, where its reduced extents are)
        at = self.program.extra_at
        for e, reduced in zip(checked, extents):
            self.empty_checks.append((e, range(at, at + len(reduced))))
            at += len(reduced)
        if config.dumping("host_program"):
            config.dump("host_program", str(self.program))

    @property
    def fusion(self) -> FusionGraph:
        """The fusion this runtime runs."""
        return self._fusion()

    def _output_spec(self, out: Output) -> OutputSpec:
        if out.alias is AliasKind.REUSE_BUFFER:
            return OutputSpec(out.tv, out.aliased_input, None, in_place=id(out.tv) in self.in_place)
        if out.alias is AliasKind.EVALUATE and not any(tv is out.tv for tv in self.writes):  # else a copy task wrote it
            view = functools.partial(evaluate_view, self.input_position, out.tv)
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
        pack = self._pack_array  # not `self` in the closures: the program they go into is the runtime's own
        fillers = []
        for tv_id, p in params.arrays.items():
            where = self.input_position[tv_id]  # inputs sit in the first frame slots, in order
            fillers.append(lambda b, f, at=slot[p.name], w=where: pack(b, at, f.values[w]))
        for tv_id, p in params.writes.items():
            fillers.append(lambda b, f, at=slot[p.name], w=written[tv_id]: pack(b, at, f.values[w]))
        for tv_id, p in params.scalars.items():
            where = self.input_position[tv_id]
            fillers.append(lambda b, f, at=slot[p.name], w=where, p=p: b.__setitem__(at, scalar_bits(f.values[w], p)))
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
        pointer = array.ptr if isinstance(array, DeviceView) else array.ctypes.data
        pack_array(block, slot, pointer, array.shape, array.strides, array.itemsize)

    # --- a run ------------------------------------------------------------------------------------
    def run(self, bound: BoundInputs) -> list[np.ndarray]:
        return self.program.run(self.new_frame(bound))

    def new_frame(self, bound: BoundInputs) -> Frame:
        """A run's frame: the inputs bound, every buffer sized, the random draws made."""
        arrays = [a if isinstance(a, DeviceView) else self._addressable(n, a) for n, a in enumerate(bound.arrays)]
        frame = self.program.new_frame(arrays, bound.bindings)
        self._check_empty_reductions(frame.extents, bound.bindings)  # before anything is allocated or drawn
        frame.bound = bound
        if self.random_ops:
            refuse_random(f"fusion {self.executor.kernel.name!r}")
        frame.rng = [next_seed_offset() for _ in self.random_ops]
        frame.context = RefContext(bound.bindings, next_seed_offset)
        return frame

    def _addressable(self, position: int, array: np.ndarray) -> np.ndarray:
        """An input whose strides are not whole elements (a field of a packed record array) is read
        from a copy: refused where the copy would take what is meant for the array, an output written
        into it in place, or a `bz.graph()` that would replay the copy after the array changed."""
        if _whole_elements(array):
            return array
        tv = self.fusion.inputs[position]
        where = input_label(position, tv)
        if any(out.alias is AliasKind.REUSE_BUFFER and out.aliased_input is tv for out in self.fusion.outputs):
            raise InputError(f"{where}: expected strides of whole {array.itemsize}-byte elements for an array an "
                             f"output is written into in place, got strides {array.strides}")
        if open_graphs():
            raise UnsupportedError(f"bz.graph: {where} has strides {array.strides}, not whole {array.itemsize}-byte "
                                   "elements, so each call reads a copy of it, and a replay would read that copy "
                                   "again, not the array: record the graph on a copy (np.ascontiguousarray)")
        return np.ascontiguousarray(array)

    # --- preparing the cached call (runtime/fast_call.py) ------------------------------------------
    def run_and_prepare(self, bound: BoundInputs, inputs: Sequence[object]) -> tuple[list, PreparedCall | None]:
        """Runs the host program, then prepares the cached call for inputs described like
        `inputs` (None where the fast path does not cover the run)."""
        frame = self.new_frame(bound)
        results = self.program.run(frame)
        note_entry(f"prepared call {self.executor.kernel.name}")
        return results, self._prepare(frame, inputs)

    def _prepare(self, frame: Frame, inputs: Sequence[object]) -> PreparedCall | None:
        kinds = [array_kind(value) for value in inputs]
        arrays = [n for n, tv in enumerate(self.fusion.inputs) if tv.scalar is None]
        if len(frame.launched) != 1 or not arrays or any(kinds[n] is None for n in arrays) \
                or not self.device.can_prepare(frame, self.program.instructions):
            return None
        allocations, buffer_of = [], {}
        for instruction in self.program.instructions:
            if isinstance(instruction, Allocate):
                buffer_of[instruction.slot] = len(allocations)
                allocations.append(self.device.allocator(frame, instruction))
        copies_back = self.device.copies_back(frame, self.program.instructions, buffer_of, kinds)
        returned = self._returned(buffer_of)
        if copies_back is None or returned is None:
            return None
        slot = self.layout.slots
        written = {id(i.tv): buffer_of[i.slot] for i in self.program.instructions if isinstance(i, Allocate)}
        plan = CallPlan(
            block=frame.launched[0].tolist(),
            allocations=allocations,
            input_pointers=[(slot[p.name], self.input_position[tv_id], kinds[self.input_position[tv_id]].pointer)
                            for tv_id, p in self.params.arrays.items()],
            buffer_pointers=[(slot[p.name], written[tv_id]) for tv_id, p in self.params.writes.items()],
            buffer_pointer=buffer_pointer(frame.bound.kind),
            scalars=[ScalarSlot(slot[p.name], self.input_position[tv_id], scalar_packer(p))
                     for tv_id, p in self.params.scalars.items()],
            seeds=[self._seed_slots(tv) for tv in self.random_ops],
            copies_back=copies_back,
            returned=returned)
        prepared = self.device.prepared_call(self.executor, frame, plan, kinds[arrays[0]], arrays[0])
        prepared.entries = self.executor.entries  # FastCalls.learn files it there under its description
        prepared.executor = self.executor  # its task functions are the compiled kernel's: keep it loaded
        return prepared

    def _seed_slots(self, tv: TensorView) -> tuple[int, int] | None:
        pair = self.params.seeds.get(id(tv))
        return None if pair is None else (self.layout.slots[pair[0].name], self.layout.slots[pair[1].name])

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

    def _check_empty_reductions(self, extents: list[int], bindings: dict[str, int]) -> None:
        """max, min, argmax and argmin of nothing have no value: an error where an output reads one."""
        empty = [e for e, reduced in self.empty_checks if any(extents[i] == 0 for i in reduced)]
        check_empty_reductions(self.fusion, empty, bindings)



def evaluate_view(input_position: dict[int, int], tv: TensorView, frame: Frame) -> np.ndarray:
    """An `evaluate` output: the view ops' reference rules applied to the input (at
    `input_position[id(input)]` of the frame), on the host."""
    if tv.definition is None:
        return frame.values[input_position[id(tv)]]
    args = [evaluate_view(input_position, inp, frame) for inp in tv.definition.inputs]
    return lookup(tv.definition.op).reference(frame.context, args, tv, tv.definition.attrs)


def _view_ops(tv: TensorView) -> tuple[str, ...]:
    """The view ops from an input to `tv`, first applied first."""
    ops = []
    while tv.definition is not None:
        ops.append(tv.definition.op)
        tv = tv.definition.inputs[0]
    return tuple(reversed(ops))


def _whole_elements(array: np.ndarray) -> bool:
    return array.ndim == 0 or all(s % array.itemsize == 0 for s in array.strides)
