"""What a loop kernel (`@bz.kernel`) adds to the prepared call of runtime/fast_call.py, on every
backend: where its arguments go in the argument block (`LoopArguments`), its task bounds as Python
functions of the arguments (`bounds_function`), and the check of each call's data pointers against
the overlap its kernel was compiled for (`LoopCall`, mixed into each backend's prepared call).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from braze.kir import nodes as k
from braze.kir.layout import ArgLayout
from braze.kir.python import evaluable, python_function
from braze.runtime.arrays import OverlapCheck, pack_array
from braze.runtime.fast_call import CallPlan, ScalarSlot
from braze.runtime.scalars import scalar_packer

# Pointer sets a loop kernel's prepared call remembers as checked for overlap: a time loop rotating a
# few sets of buffers comes back to each every few steps.
_VERIFIED_POINTER_SETS = 16


def bounds_function(kernel: k.Kernel, arrays: Sequence[k.ArrayParam], scalars: Sequence[k.ScalarParam],
                    work: Sequence[int] | None = None) -> Callable[[Sequence, Sequence], tuple]:
    """`(shapes, scalars) -> ((begin, end) per task)`: Python compiled from the tasks' bounds
    (kir/python.py), reading the array arguments' shapes and the scalars in parameter order. With
    `work` (per task its work per index), `(begin, end, work)` per task: the ranges of a launch."""
    array_index = {p.name: n for n, p in enumerate(arrays)}
    scalar_index = {p.name: n for n, p in enumerate(scalars)}

    def leaf(e: k.Expr) -> str | None:
        if isinstance(e, k.ScalarRef):
            return f"S[{scalar_index[e.param.name]}]"
        if isinstance(e, k.ArrayExtent):
            return f"A[{array_index[e.param.name]}][{e.axis}]"
        return None

    if work is None:
        return python_function([(t.begin, t.end) for t in kernel.tasks], "A, S", leaf)
    return python_function([(t.begin, t.end, k.Const(w, t.begin.dtype)) for t, w in zip(kernel.tasks, work)],
                           "A, S", leaf)


def bounds_read_scalars(kernel: k.Kernel) -> bool:
    """Whether a task's bounds read a scalar argument: a launch's ranges then change from call to call
    (bounds of extents alone are fixed by the arrays' shapes)."""
    def extent(e: k.Expr) -> str | None:
        return "0" if isinstance(e, k.ArrayExtent) else None

    return not all(evaluable(bound, extent) for t in kernel.tasks for bound in (t.begin, t.end))


class LoopArguments:
    """Where a loop kernel's arguments go in its argument block (kir/layout.py): arrays and scalars
    in parameter order, and the word its debug checks write a failure into. A scalar out of its
    dtype's range raises OverflowError as it is packed."""

    def __init__(self, kernel: k.Kernel, arrays: Sequence[k.ArrayParam], scalars: Sequence[k.ScalarParam]) -> None:
        layout = ArgLayout.of(kernel.params)
        self.size = max(layout.size, 1)
        self.array_slots = [layout.slots[p.name] for p in arrays]
        self.scalar_slots = [(layout.slots[p.name], scalar_packer(p)) for p in scalars]
        self.status_slot = layout.slots.get(k.ASSERT_STATUS)
        self.messages = k.assert_messages(kernel)

    def plan(self, arrays: Sequence, array_positions: Sequence[int], readers: Sequence[Callable[[object], int]],
             scalar_positions: Sequence[int], status: int = 0) -> CallPlan:
        """A prepared call's plan for arrays described as `arrays`, at `array_positions` among the
        arguments and each read by its pointer reader, and scalars at `scalar_positions`: the block's
        pointers and scalars are patched per call."""
        return CallPlan(self.block(arrays, [0] * len(arrays), status),
                        [(slot, position, read) for slot, position, read in zip(self.array_slots, array_positions,
                                                                                 readers)],
                        [ScalarSlot(slot, position, pack) for (slot, pack), position in zip(self.scalar_slots,
                                                                                           scalar_positions)])

    def block(self, arrays: Sequence, pointers: Sequence[int], status: int = 0) -> list[int]:
        """The argument block with the arrays' pointers, extents and strides, and the status word's
        address, in place (scalars are written per call)."""
        block = [0] * self.size
        for slot, array, pointer in zip(self.array_slots, arrays, pointers):
            pack_array(block, slot, pointer, array.shape, array.strides, array.itemsize)
        if self.status_slot is not None:
            block[self.status_slot: self.status_slot + 3] = [status, 1, 1]
        return block


class LoopCall:
    """What a loop kernel's prepared call adds to a fusion's, mixed into each backend's. Each call
    reads the data pointers; a set not seen before is checked to overlap as the arrays the kernel was
    compiled for did (remembered: a set checked once is not checked again), then patched into the
    block. Arguments that overlap the other way go to the paired call (`pair`), whose kernel was
    compiled for them; where there is none yet the call answers None, and the caller binds the
    arguments, which finds the kernel they need and pairs a call for it."""

    def bind_loop(self, launcher: object, arrays: Sequence, scalar_positions: list[int], overlapping: bool,
                  counts: Callable[[object], bool] = lambda array: True) -> None:
        """`launcher`: the kernel's (its compiled code stays loaded while the call lives); `arrays`: the
        arrays it was prepared for; `counts`: whether one overlapping itself counts (OverlapCheck)."""
        self.executor = launcher
        self.shapes = [a.shape for a in arrays]  # what the bounds read
        self.scalar_positions, self.overlapping = scalar_positions, overlapping
        self.overlap = OverlapCheck(arrays, counts)
        self.patched: tuple[int, ...] | None = None  # the pointers in the block
        self.verified: dict[tuple[int, ...], bool] = {}  # pointer sets checked: whether they overlap as compiled for
        self.other: LoopCall | None = None  # the call for arrays that overlap the other way (`pair`)

    def pair(self, other: LoopCall) -> None:
        """Makes `other`, the call of the same description whose kernel was compiled for arrays that
        overlap the other way (`f(x, x)` beside `f(x, y)`), take the calls that overlap as its
        arrays did, and back: a program calling both ways stays on cached calls."""
        self.other, other.other = other, self

    def release(self) -> None:
        other, self.other = self.other, None
        super().release()
        if other is not None:
            other.release()

    def _pointer_lines(self, names: dict[str, object], pointers: list[tuple[int, str]]) -> list[str]:
        """The generated call's lines reading the pointers and, where they changed, checking and
        patching them (or handing the call to the paired one)."""
        names.update(state=self, verified=self.verified, overlap_as_compiled=self._overlap_as_compiled,
                     other=self._other_overlap)
        return [f"pointers = ({''.join(f'{expression}, ' for _, expression in pointers)})",
                "if pointers != state.patched:", "    fits = verified.get(pointers)", "    if fits is None:",
                "        fits = overlap_as_compiled(pointers)", "    if not fits:", "        return other(inputs)",
                f"    ({''.join(f'block[{slot}], ' for slot, _ in pointers)}) = pointers",
                "    state.patched = pointers"]

    def _overlap_as_compiled(self, pointers: tuple[int, ...]) -> bool:
        """Whether arrays at `pointers` overlap as those the kernel was compiled for did (remembered)."""
        fits = self.overlap(pointers) == self.overlapping
        if len(self.verified) >= _VERIFIED_POINTER_SETS:
            self.verified.clear()
        self.verified[pointers] = fits
        return fits

    def _other_overlap(self, inputs: Sequence[object]) -> list | None:
        """The paired call's answer (None where there is none yet: the caller binds, and pairs one)."""
        other = self.other
        return None if other is None else other.run(inputs)

    def scalars(self, inputs: Sequence[object]) -> list:
        """The call's scalar arguments, in parameter order."""
        return [inputs[p] for p in self.scalar_positions]
