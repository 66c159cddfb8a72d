"""HostProgram: what the host does to run a compiled fusion, as a list of instructions.

    Allocate(tv, zero_init)      a written tensor, sized by the compiled shape function
    Launch(executor, ins, outs)  one kernel over its argument block
    Alias(out, in, view)         an output that is an input: a view of it, or written back into it
    Free(tv)                     an intermediate, right after its last use

The interpreter (`HostProgram.run`) walks the instructions over a `Frame` that holds one run's
values by slot. All shape and stride arithmetic happens in one call of the shape function
(native when the host JIT works), so a run evaluates nothing symbolic for allocation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import count

import numpy as np

from braze import config
from braze.errors import OutOfMemoryError
from braze.host.shapes import Layout, ShapeProgram, infer_layout, shape_function
from braze.ir.scalar import Scalar
from braze.ir.tensor import TensorView


@dataclass
class Frame:
    """One run's state: every tensor's array by slot, the bound extents and the shape function's values."""

    values: list
    bindings: dict[str, int]
    extents: list[int] = field(default_factory=list)  # the shape function's values
    rng: list = field(default_factory=list)  # (seed, offset) per random op, drawn for this run
    context: object = None  # what view aliases' reference rules read (bound extents)
    bound: object = None  # the run's bound inputs (a GPU device reads their device and stream)
    launched: list = field(default_factory=list)  # the argument blocks launched (a cached call copies them)


class CpuDevice:
    """Where a program's buffers live and its kernels run: host memory and CPU kernels.

    A GPU runtime gives its program a subclass that allocates on the GPU and launches on a stream.
    """

    def allocate(self, frame: Frame, tv: TensorView, numel: int, sizes: list[int], strides: list[int],
                 zero: bool = False) -> object:
        """A buffer of `numel` elements (zeros or uninitialized), seen through `sizes` and (element) `strides`."""
        return host_buffer(tv.dtype.numpy, numel, sizes, strides, zero, buffer_name(tv))

    def launch(self, executor: object, block: np.ndarray, frame: Frame) -> None:
        executor.run(block, frame.bindings)

    def copy_into(self, target: object, source: object) -> None:
        np.copyto(target, source)


def buffer_name(tv: TensorView) -> str:
    """`output 1 (T4)` or `intermediate T3`: what an allocation error names."""
    for n, out in enumerate(tv.fusion.outputs):
        if out.tv is tv:
            return f"output {n} ({tv.name}{', hidden' if out.hidden else ''})"
    return f"intermediate {tv.name}"


def host_buffer(dtype: np.dtype, numel: int, sizes: Sequence[int], strides: Sequence[int],
                zero: bool = False, name: str = "a buffer") -> np.ndarray:
    """`numel` elements of host memory seen through `sizes` and element `strides`; `name` (the
    tensor) is what an OutOfMemoryError names."""
    try:
        if zero:
            storage = np.zeros(numel, dtype)
        elif config.enabled("poison_outputs"):  # an element no kernel writes shows as NaN or -1
            storage = np.full(numel * dtype.itemsize, 0xFF, np.uint8).view(dtype)
        else:
            storage = np.empty(numel, dtype)
    except MemoryError:
        raise OutOfMemoryError(f"{name}: expected {numel * dtype.itemsize} bytes of host memory for "
                               f"{dtype.name}{list(sizes)}, got none: the allocation failed") from None
    return np.ndarray(sizes, dtype, storage, 0, [s * dtype.itemsize for s in strides])


@dataclass(eq=False)
class Allocate:
    """A fresh buffer for `tv`, laid out as its allocation domain says (padding included)."""

    tv: TensorView
    zero_init: bool
    slot: int
    layout: Layout
    at: int  # where its numel, sizes and strides start in the shape function's output
    device: CpuDevice

    def __post_init__(self) -> None:
        rank = len(self.layout.sizes)
        self._sizes = slice(self.at + 1, self.at + 1 + rank)
        self._strides = slice(self.at + 1 + rank, self.at + 1 + 2 * rank)

    def run(self, frame: Frame) -> None:
        e = frame.extents
        frame.values[self.slot] = self.device.allocate(frame, self.tv, e[self.at], e[self._sizes], e[self._strides],
                                                       self.zero_init)

    def extents(self, frame: Frame) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        """The buffer's element count, sizes (its allocation domain's, padding included) and element
        strides in a run."""
        e = frame.extents
        return e[self.at], tuple(e[self._sizes]), tuple(e[self._strides])

    def text(self) -> str:
        layout = self.layout
        return (f"Allocate {self.tv.name}: {self.tv.dtype.name} sizes {_list(layout.sizes)} "
                f"strides {_list(layout.strides)} numel {layout.numel} zero_init={self.zero_init}")


@dataclass(eq=False)
class WriteInPlace(Allocate):
    """The buffer of an output written in place into input `source` (`reuse_buffer`): the input
    itself when the kernel can write through it, else a fresh buffer that `Alias` copies back.

    The kernel was compiled with the strides braze allocates with; those it fixed at 1 must be 1 in
    the input too. An input that overlaps another input (the same array passed twice) would be read
    through the other after being written, so it gets a fresh buffer as well.
    """

    source: int = 0  # the input's slot
    inputs: int = 0  # how many input slots the frame has

    def __post_init__(self) -> None:
        super().__post_init__()
        self._unit = tuple(s.is_const and s.value == 1 for s in self.layout.strides)

    def run(self, frame: Frame) -> None:
        target = frame.values[self.source]
        if self.fits(target, frame):
            frame.values[self.slot] = target
        else:
            super().run(frame)

    def fits(self, target: object, frame: Frame) -> bool:
        """Whether the kernel can write this run's output straight into `target`."""
        if not isinstance(target, np.ndarray) or not target.flags.writeable or target.shape != self.extents(frame)[1]:
            return False
        for extent, stride, unit in zip(target.shape, target.strides, self._unit):
            if extent > 1 and (stride == 0 or unit and stride != target.itemsize):
                return False
        others = (frame.values[n] for n in range(self.inputs) if n != self.source)
        return not any(isinstance(o, np.ndarray) and np.may_share_memory(o, target) for o in others)

    def text(self) -> str:
        return f"{super().text()} (or in place into input {self.source})"


@dataclass(eq=False)
class Launch:
    """Runs `executor`'s kernel on an argument block packed from the frame."""

    executor: object  # a KernelExecutor (or a GPU one), run by the device
    ins: tuple[TensorView, ...]
    outs: tuple[TensorView, ...]
    pack: Callable[[Frame], np.ndarray]
    device: CpuDevice

    def run(self, frame: Frame) -> None:
        block = self.pack(frame)
        frame.launched.append(block)
        self.device.launch(self.executor, block, frame)

    def text(self) -> str:
        name = self.executor.kernel.name
        return f"Launch {name}({', '.join(t.name for t in self.ins)}) -> ({', '.join(t.name for t in self.outs)})"


@dataclass(eq=False)
class Alias:
    """Output `out` is input `inp`: a view of it (`view` names the view ops), or `out`'s buffer
    written back into it (`view` is None)."""

    out: TensorView
    inp: TensorView
    view: tuple[str, ...] | None
    slot: int  # where the output goes
    source: int  # the input's slot
    written: int | None = None  # the slot of the buffer written back, for in-place outputs
    compute: Callable[[Frame], np.ndarray] | None = None  # the view, for view aliases
    device: CpuDevice | None = None  # copies the written-back buffer

    def run(self, frame: Frame) -> None:
        if self.view is None:
            if frame.values[self.written] is not frame.values[self.source]:  # else written in place
                self.device.copy_into(frame.values[self.source], frame.values[self.written])
            frame.values[self.slot] = frame.values[self.source]
        else:
            frame.values[self.slot] = self.compute(frame)

    def text(self) -> str:
        if self.view is None:
            return f"Alias {self.out.name} = {self.inp.name} written back"
        return f"Alias {self.out.name} = {self.inp.name} view ({', '.join(self.view) or 'itself'})"


@dataclass(eq=False)
class Free:
    """Drops an intermediate's buffer after its last use."""

    tv: TensorView
    slot: int

    def run(self, frame: Frame) -> None:
        frame.values[self.slot] = None

    def text(self) -> str:
        return f"Free {self.tv.name}"


Instruction = Allocate | Launch | Alias | Free


@dataclass(eq=False)
class HostProgram:
    """The instructions of one compiled fusion and the shape function that sizes its buffers."""

    name: str
    inputs: tuple[TensorView, ...]
    instructions: list[Instruction]
    outputs: tuple[int, ...]  # the slot of each fusion output
    output_names: tuple[str, ...]
    slots: int
    shapes: ShapeProgram
    shape_function: Callable[[Sequence[int]], list[int]]
    extra_at: int  # where the caller's extra values start in the shape function's output

    def new_frame(self, arrays: Sequence[np.ndarray], bindings: dict[str, int]) -> Frame:
        """A frame holding the inputs (slots 0..n-1) and the sizes of every buffer to allocate."""
        values = list(arrays) + [None] * (self.slots - len(arrays))
        frame = Frame(values, bindings)
        frame.extents = self.shape_function([bindings[name] for name in self.shapes.symbols])
        return frame

    def run(self, frame: Frame) -> list[np.ndarray]:
        """Runs every instruction in order; returns the outputs."""
        for instruction in self.instructions:
            instruction.run(frame)
        return [frame.values[slot] for slot in self.outputs]

    def __str__(self) -> str:
        inputs = ", ".join(_input_text(tv) for tv in self.inputs)
        lines = [f"HostProgram {self.name}({inputs})"]
        lines += [f"  {instruction.text()}" for instruction in self.instructions]
        lines.append(f"  return ({', '.join(self.output_names)})")
        return "\n".join(lines)


def _list(values: Sequence[object]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _input_text(tv: TensorView) -> str:
    label = f" {tv.label!r}" if tv.label else ""
    kind = f"{tv.dtype.name} scalar" if tv.scalar is not None else tv.type_text()
    return f"{tv.name}{label}: {kind}"


# --- building the program of a single-kernel fusion ----------------------------------------------------
@dataclass(frozen=True)
class OutputSpec:
    """One fusion output as the program sees it: which tensor, how it aliases, whether it is a view."""

    tv: TensorView
    alias_of: TensorView | None  # the input it aliases, if any
    view: tuple[str, ...] | None  # view op names for a view alias; None for written-back or new outputs
    compute: Callable[[Frame], np.ndarray] | None = None
    in_place: bool = False  # a written-back output the kernel may write straight into its input


def single_kernel_program(name: str, inputs: Sequence[TensorView], writes: Sequence[TensorView],
                          launch: Callable[[dict[int, int]], Launch], outputs: Sequence[OutputSpec],
                          extra_values: Sequence[Scalar] = (), device: CpuDevice | None = None) -> HostProgram:
    """The program of one kernel writing `writes`: allocate them, launch, alias, and free each
    buffer that is no output right after its last use (the launch, or its write back).

    Inputs take the first frame slots, in order; `launch(written)` builds the Launch given the
    slot of each written tensor (id(tv) -> slot: an input may be written too, into a buffer of its own,
    or into the input itself for an output marked `in_place`).
    The shape function also computes `extra_values`, from `frame.extents[program.extra_at]` on.
    `device` allocates and copies buffers (host memory by default).
    """
    device = device or CpuDevice()
    layouts = [infer_layout(tv) for tv in writes]
    values = [v for layout in layouts for v in layout.values]
    shapes = ShapeProgram.of(name, values + list(extra_values))
    fresh = count(len(inputs))
    written = {id(tv): next(fresh) for tv in writes}
    input_slot = {id(tv): n for n, tv in enumerate(inputs)}
    in_place = {id(o.tv): input_slot[id(o.alias_of)] for o in outputs if o.in_place}
    instructions: list[Instruction] = []
    at = 0
    for tv, layout in zip(writes, layouts):
        if id(tv) in in_place:
            instructions.append(WriteInPlace(tv, False, written[id(tv)], layout, at, device, in_place[id(tv)],
                                             len(inputs)))
        else:
            instructions.append(Allocate(tv, False, written[id(tv)], layout, at, device))
        at += len(layout.values)
    instructions.append(launch(written))
    returned = {id(o.tv) for o in outputs if o.alias_of is None}
    written_back = {id(o.tv) for o in outputs if o.alias_of is not None and o.view is None} - returned
    instructions += [Free(tv, written[id(tv)]) for tv in writes if id(tv) not in returned | written_back]
    output_slots = []
    for spec in outputs:
        if spec.alias_of is None:
            output_slots.append(written[id(spec.tv)])
            continue
        output_slots.append(next(fresh))  # an alias gets a slot of its own: its tensor may be an output too
        source = None if spec.view is not None else written[id(spec.tv)]
        instructions.append(Alias(spec.tv, spec.alias_of, spec.view, output_slots[-1], input_slot[id(spec.alias_of)],
                                  source, spec.compute, device))
    instructions += [Free(tv, written[id(tv)]) for tv in writes if id(tv) in written_back]
    names = tuple(o.tv.name for o in outputs)
    return HostProgram(name, tuple(inputs), instructions, tuple(output_slots), names, next(fresh), shapes,
                       shape_function(shapes), len(values))
