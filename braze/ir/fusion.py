"""The FusionGraph container: inputs, expressions, outputs with their aliases, and a stable printer."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from braze.dtypes import DType
from braze.errors import FusionDefinitionError
from braze.ir.scalar import Scalar, symbol
from braze.ir.tensor import TensorView, Val


def value_symbol_name(tv: TensorView) -> str:
    """The name of the symbol an integer scalar input's value binds (`FusionGraph.value_symbol`)."""
    return f"{tv.name}_value"


class AliasKind(enum.Enum):
    """How an output's memory relates to the inputs (docs/architecture.md, "Fusion IR")."""

    NEW = "new"  # a fresh buffer
    REUSE_BUFFER = "reuse_buffer"  # written in place into an input
    EVALUATE = "evaluate"  # a view of an input, computed on the host with no kernel


@dataclass(eq=False)
class Expr:
    """One op application: `outputs = op(inputs, **attrs)`. `op` names an entry of the op table."""

    op: str
    inputs: tuple[TensorView, ...]
    outputs: tuple[TensorView, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    origin: str | None = None  # the op the user wrote, when a composite (softmax, ...) added this one

    def text(self) -> str:
        outs = ", ".join(f"{o.name}: {o.type_text()}" for o in self.outputs)
        args = [i.name for i in self.inputs] + [f"{k}={_attr_text(v)}" for k, v in self.attrs.items()]
        return f"{outs} = {self.op}({', '.join(args)})"


def _attr_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_attr_text(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, enum.Enum):
        return value.value
    return str(value) if isinstance(value, Scalar) else repr(value)


@dataclass(eq=False)
class Output:
    """A fusion output: the tensor, how its memory is obtained and whether it is returned."""

    tv: TensorView
    alias: AliasKind = AliasKind.NEW
    aliased_input: TensorView | None = None
    hidden: bool = False


@dataclass(frozen=True)
class ExtentCheck:
    """Two extents that must be equal at run time (symbolic extents met in a broadcast, a cat...)."""

    lhs: Scalar
    rhs: Scalar
    why: str  # "dimension 1 of T0 ('x') and dimension 0 of T1 ('b') must match"


@dataclass(frozen=True)
class NarrowedNumber:
    """A runtime Python number (or an op over such numbers) that op `op` computes in `dtype`, an integer
    type narrower than int64: its value must fit there."""

    op: str
    value: TensorView
    dtype: DType


class FusionGraph:
    """A graph of tensor ops: inputs, expressions in definition order, and outputs."""

    def __init__(self) -> None:
        self.inputs: list[TensorView] = []
        self.exprs: list[Expr] = []
        self.outputs: list[Output] = []
        self.extent_checks: list[ExtentCheck] = []
        # Integer scalar inputs whose values size a shape (nvFuser's `full((n, m), ...)`, `reshape(x, [d0, s1])`
        # of scalar inputs): each is the symbol `value_symbol` names, bound from the value at every call.
        self.sizing_scalars: list[TensorView] = []
        # Extents of slices that keep one element of a long enough dimension (`x[:, :1]` of a symbolic
        # extent): an elementwise op broadcasts them as size-1 dimensions, checking the length at run time.
        self.one_element_extents: set[Scalar] = set()
        # Symbolic extents its caller guarantees are never 1: @bz.jit traces an input extent of 1 as a
        # broadcast dimension of a signature of its own, so its symbolic extents are the others.
        # torch's `x.squeeze(dim)` leaves such a dimension alone.
        self.extents_never_one: set[Scalar] = set()
        # Type promotion as torch's, not NumPy's: @bz.jit traces torch tensors so. A 0-d tensor (a
        # torch.tensor(2.0) argument, a full sum) is then as weak as a typed scalar: a tensor with
        # dimensions decides the dtype over it, where NumPy 2 lets a 0-d array widen it.
        self.torch_promotion = False
        # `x.size` as NumPy spells it, the element count, where @bz.jit traces NumPy (or CuPy) arrays and
        # no torch tensor; elsewhere it is torch's method `x.size(dim)` (a Fusion builder's nvFuser code).
        self.numpy_size = False
        # Integers become floats as NumPy makes them where @bz.jit traces NumPy (or CuPy) arrays and no
        # torch tensor: `counts / n`, `np.sqrt(k)`, `k * 0.5` and `k.mean()` of int64 are float64 there
        # (ops/elementwise.py, numpy_float_result); elsewhere float32, torch's default.
        self.numpy_promotion = False
        # How an array made outside the fusion becomes one of its inputs: @bz.jit's trace takes the arrays
        # its function makes or reads (`torch.ones(n, n).tril()`, a module's buffer) so; a `bz.Fusion`
        # builder has none and refuses them (arrays come in as define_tensor inputs).
        self.capture_array: Callable[[object], TensorView] | None = None
        # What `x.device` answers: "cpu" (NumPy 2's), or the torch device of @bz.jit's torch arguments.
        self.array_device: object = "cpu"
        # Runtime Python numbers (@bz.jit's int arguments, and ops over them) that an op computes in a
        # narrower integer type: the call checks each value fits, as NumPy 2 checks a Python int.
        self.narrowed_numbers: list[NarrowedNumber] = []
        self._vals: list[Val] = []
        self.frozen_at: str | None = None  # where the definition ended; None while it is being defined

    # --- the definition is final once it ends ------------------------------------------------------
    def freeze(self, where: str) -> None:
        """Ends the definition (at the end of its `with` block, or at its first run when it was built
        without one): compiled code and cached calls are made from it, so a later change would not
        reach them."""
        if self.frozen_at is None:
            self.frozen_at = where

    def check_definable(self, what: str) -> None:
        """Raises unless the fusion is still being defined; `what` names the change attempted."""
        if self.frozen_at is not None:
            raise FusionDefinitionError(
                f"{what}: expected a fusion still being defined, got {getattr(self, 'name', 'fusion')!r}, "
                f"final since {self.frozen_at}; define a new bz.Fusion for another program")

    # --- building ------------------------------------------------------------------------------
    def new_name(self, val: Val) -> str:
        """Names every value `T<n>` in creation order, which keeps the printer stable."""
        self.check_definable("a new tensor")
        self._vals.append(val)
        return f"T{len(self._vals) - 1}"

    def add_input(self, tv: TensorView) -> TensorView:
        self.check_definable("an input")
        self.inputs.append(tv)
        return tv

    def add_expr(self, op: str, inputs: tuple[TensorView, ...], outputs: tuple[TensorView, ...], **attrs) -> Expr:
        self.check_definable(op)
        for tv in inputs:
            self.check_owned(tv, op)
        expr = Expr(op, inputs, outputs, attrs)
        for out in outputs:
            out.definition = expr
        self.exprs.append(expr)
        return expr

    def value_symbol(self, tv: TensorView) -> Scalar:
        """The symbolic extent an integer scalar input's value stands for where it sizes a shape."""
        if not any(tv is t for t in self.sizing_scalars):
            self.sizing_scalars.append(tv)
        return symbol(value_symbol_name(tv))

    def require_equal(self, lhs: Scalar, rhs: Scalar, why: str) -> None:
        """Records that two extents must match; static mismatches fail now, symbolic ones at run time."""
        self.check_definable(why.partition(":")[0])
        if lhs == rhs:
            return
        if lhs.is_const and rhs.is_const:
            raise FusionDefinitionError(f"{why}: got extents {lhs} and {rhs}")
        self.extent_checks.append(ExtentCheck(lhs, rhs, why))

    def check_owned(self, tv: TensorView, what: str) -> None:
        if not isinstance(tv, TensorView):
            raise FusionDefinitionError(f"{what}: expected a TensorView, got {type(tv).__name__}")
        if tv.fusion is not self:
            raise FusionDefinitionError(f"{what}: {tv.describe()} belongs to another fusion, not this one")

    def rebind(self, held: TensorView, value: TensorView) -> None:
        """The Python object `held` now stands for `value` (`x[1:-1] = v` gives x a new value, as NumPy code
        writes an array in place); what used `held` before keeps its old value, which `value`'s object
        takes. The two objects trade their states, and every expression of the graph its references."""
        swapped = {id(held): value, id(value): held}
        held.__dict__, value.__dict__ = value.__dict__, held.__dict__
        for expr in self.exprs:
            expr.inputs = tuple(swapped.get(id(t), t) for t in expr.inputs)
            expr.outputs = tuple(swapped.get(id(t), t) for t in expr.outputs)

    def add_output_record(self, output: Output) -> None:
        self.check_definable("add_output")
        self.check_owned(output.tv, "add_output")
        self.outputs.append(output)

    # --- queries -------------------------------------------------------------------------------
    @property
    def returned_outputs(self) -> list[Output]:
        return [o for o in self.outputs if not o.hidden]

    def __str__(self) -> str:
        lines = ["Fusion("]
        lines += ["  inputs:"] + [f"    {_input_text(tv)}" for tv in self.inputs]
        lines += ["  exprs:"] + [f"    {e.text()}" for e in self.exprs]
        lines += ["  extent checks:"] * bool(self.extent_checks)
        lines += [f"    {c.lhs} == {c.rhs}" for c in self.extent_checks]
        lines += ["  outputs:"] + [f"    {_output_text(o)}" for o in self.outputs]
        return "\n".join(lines + [")"])


def _input_text(tv: TensorView) -> str:
    if tv.scalar is not None:
        return f"{tv.name}: {tv.dtype.name} scalar"
    text = f"{tv.name}: {tv.type_text()}"
    text += f" label={tv.label!r}" if tv.label else ""
    return text + (f" stride_order={tv.stride_order}" if tv.stride_order else "")


def _output_text(out: Output) -> str:
    text = f"{out.tv.name}: {out.tv.type_text()} {out.alias.value}"
    if out.aliased_input is not None:
        text += f" of {out.aliased_input.name}"
    if out.tv.stride_order:
        text += f" stride_order={out.tv.stride_order}"
    elif not out.tv.has_default_allocation:
        text += f" allocation={TensorView.domain_text(out.tv.allocation)}"
    return text + " hidden" * out.hidden


# --- the fusion being defined (ops without tensor operands, like `zeros`, land in it) --------------
_active = threading.local()


@contextmanager
def defining(fusion: FusionGraph) -> Iterator[FusionGraph]:
    """Makes `fusion` the one that creation ops add to, on this thread, for the `with` body."""
    stack = _active.__dict__.setdefault("stack", [])
    stack.append(fusion)
    try:
        yield fusion
    finally:
        stack.pop()


def defining_any() -> bool:
    """Whether a fusion is being defined on this thread (a `with bz.Fusion()` body or a @bz.jit trace)."""
    return bool(getattr(_active, "stack", None))


def active_fusion(what: str) -> FusionGraph:
    """The fusion being defined on this thread, or an error naming the op that needed one."""
    stack = getattr(_active, "stack", [])
    if not stack:
        raise FusionDefinitionError(f"{what}: no fusion is being defined; call it inside `with bz.Fusion() as f:`")
    return stack[-1]
