"""Allocation shape and stride inference (docs/architecture.md, "Runtime").

A tensor's allocation domain is derived from its logical domain by splits (the outer extent is
a ceildiv, so a non-divisible extent is padded), merges (a product) and reorders. Memory is
contiguous in allocation order; walking the transforms back gives each logical dimension its
stride, so the tensor the user sees is a strided view of the (possibly padded) allocation.
A broadcast dimension (extent 1, indexed at 0) takes its place in allocation order, and the stride
that place gives it, as torch and NumPy give a size-1 dimension; reduction dimensions are not
allocated at all.

Everything here is symbolic (`Scalar`s over the input extents). `ShapeProgram` flattens the
expressions of all of a fusion's allocated tensors into one straight-line program with shared
subexpressions; `braze.native.host_jit` compiles it to native code, `PythonShapeFunction` runs it in
Python, and `shape_function` gives the one a host program calls: Python first, then native.
"""

from __future__ import annotations

import operator
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from braze import config
from braze.errors import InputError, UnsupportedError
from braze.ir.domain import IterDomain, Merge, Split
from braze.ir.scalar import Scalar, as_scalar, ceildiv, const
from braze.ir.tensor import TensorView
from braze.native import host_jit

_ONE = const(1)
_ZERO = const(0)


@dataclass(frozen=True)
class Layout:
    """The memory layout of one tensor, in elements, as expressions over the input extents."""

    tensor: str
    allocation_sizes: tuple[Scalar, ...]  # allocation order, outermost first; reductions dropped
    allocation_strides: tuple[Scalar, ...]  # contiguous in allocation order
    sizes: tuple[Scalar, ...]  # the visible logical dimensions
    strides: tuple[Scalar, ...]  # of the logical dimensions
    numel: Scalar  # elements to allocate, padding included

    @property
    def values(self) -> tuple[Scalar, ...]:
        """What a shape function computes for this tensor: numel, then sizes, then strides."""
        return (self.numel, *self.sizes, *self.strides)


def contiguous_strides(sizes: Sequence[Scalar]) -> tuple[tuple[Scalar, ...], Scalar]:
    """Row-major strides of `sizes` and the element count they span."""
    strides: list[Scalar] = []
    span = _ONE
    for size in reversed(sizes):
        strides.append(span)
        span = span * size
    return tuple(reversed(strides)), span


def infer_layout(tv: TensorView) -> Layout:
    """Allocation sizes and strides of `tv`, and the logical strides that view them.

    Raises `UnsupportedError` when the allocation domain is no strided view of the logical one
    (a split whose inner part is not laid out right inside its outer part, as in a blocked
    NCHWc layout): the kernels index tensors by strides only.
    """
    allocation = [d for d in tv.allocation if not d.is_reduction]
    extents = _AllocationExtents()
    sizes = tuple(extents.of(d) for d in allocation)
    allocation_strides, numel = contiguous_strides(sizes)
    strides = {id(d): s for d, s in zip(allocation, allocation_strides)}
    _strides_back_to_logical(tv, strides, extents)
    logical = tv.visible
    return Layout(
        tensor=tv.name,
        allocation_sizes=sizes,
        allocation_strides=allocation_strides,
        sizes=tuple(d.extent for d in logical),
        # A broadcast keeps the stride of its place: a stride of 0 would read as another layout
        # to whoever compares strides (Dynamo's guards recompile a graph fed a (0, 1)-strided [1, n]).
        strides=tuple(strides.get(id(d), _ZERO) if d.is_broadcast else strides[id(d)] for d in logical),
        numel=numel,
    )


class _AllocationExtents:
    """How many elements each dimension takes in memory, replayed from the logical extents.

    A split's outer part is ceildiv(extent, factor) (padding the remainder; the exact quotient
    where the factor divides the extent, so that equal strides compare equal) and its inner part
    the factor; a merge multiplies. Broadcast dimensions, and both parts of a split broadcast
    dimension, take one element: they are never stored more than once.
    """

    def __init__(self) -> None:
        self.memo: dict[int, Scalar] = {}

    def of(self, d: IterDomain) -> Scalar:
        if id(d) not in self.memo:
            self.memo[id(d)] = self._compute(d)
        return self.memo[id(d)]

    def _compute(self, d: IterDomain) -> Scalar:
        t = d.definition
        if d.is_broadcast:
            return _ONE
        if isinstance(t, Merge):
            return self.of(t.outer) * self.of(t.inner)
        if isinstance(t, Split) and d is t.inner:
            return t.factor
        if isinstance(t, Split):
            extent = self.of(t.inp)
            quotient = exact_quotient(extent, t.factor)  # no padding: written without the ceildiv
            return quotient if quotient is not None else ceildiv(extent, t.factor)
        return d.extent


def undone_merges(t: Split, extents: _AllocationExtents) -> tuple[list[IterDomain], list[IterDomain]] | None:
    """The merged dimensions that split `t` takes apart again, as (outer digits, inner digits), if any.

    Merges make an index a mixed-radix number: merge(a, b) indexes as a * extent(b) + b, so the
    split dimension's digits are the dimensions its merges put together, outermost first. Where the
    innermost digits span exactly the factor, the split's inner part indexes as those digits and
    its outer part as the rest (no carry crosses the cut), whatever the parts are reordered to.
    Merges that only put a split back together lie between the split and its digits unseen: they
    leave the index as it was (their extent may be padded, which then pads the outer part).
    """
    if t.inp.is_broadcast:
        return None
    digits = _digits(_index_source(t.inp))
    span = _ONE
    for cut in range(len(digits) - 1, 0, -1):
        span = span * extents.of(digits[cut])
        if same_product(span, t.factor):
            return digits[:cut], digits[cut:]
    return None


def _digits(d: IterDomain) -> list[IterDomain]:
    """The dimensions that merges put together into `d`, outermost first (`d` itself if none)."""
    merge = d.definition
    if isinstance(merge, Merge) and not d.is_broadcast:
        return _digits(merge.outer) + _digits(merge.inner)
    return [d]


def _index_source(d: IterDomain) -> IterDomain:
    """The dimension whose index `d` is: `d` itself, or what a merge of both parts of a split restores.

    merge(split(x, f)) indexes as (i // f) * f + i % f = i, the index of x (only its extent rounds up
    to a multiple of f).
    """
    merge = d.definition
    while isinstance(merge, Merge) and not d.is_broadcast:
        split = merge.outer.definition
        if not (isinstance(split, Split) and split.outer is merge.outer and split.inner is merge.inner):
            break
        d = split.inp
        merge = d.definition
    return d


def _strides_back_to_logical(tv: TensorView, strides: dict[int, Scalar], extents: _AllocationExtents) -> None:
    """Gives each dimension the allocation was derived from its stride, undoing transforms until none is left.

    A merge hands its stride to its inner part and `stride * inner extent` to its outer part. A
    split undoes once both parts have strides, which must satisfy `outer = inner * factor`
    (unless it takes merges apart again: its parts then hand their strides to the merged digits).
    """
    pending = [d for d in tv.allocation if id(d) in strides and d.definition is not None]
    while pending:
        d = pending.pop()
        t = d.definition
        if isinstance(t, Merge) and id(t.out) in strides:
            s = strides.pop(id(t.out))
            strides[id(t.inner)], strides[id(t.outer)] = s, s * extents.of(t.inner)
            pending += [x for x in (t.outer, t.inner) if x.definition is not None]
        elif isinstance(t, Split) and id(t.outer) in strides and id(t.inner) in strides and id(t.inp) not in strides:
            outer, inner = strides[id(t.outer)], strides[id(t.inner)]
            digits = None if _strided_split(t, outer, inner, extents) else undone_merges(t, extents)
            if digits is not None:
                for part, stride in zip(digits, (outer, inner)):
                    _stride_digits(part, stride, extents, strides)
                strides[id(t.inp)] = inner  # marks the split undone; the merged dimension has no single stride
                pending += [x for x in (*digits[0], *digits[1]) if x.definition is not None]
                continue
            strides[id(t.inp)] = _split_stride(tv, t, outer, inner, extents)
            if t.inp.definition is not None:
                pending.append(t.inp)


def _stride_digits(digits: list[IterDomain], stride: Scalar, extents: _AllocationExtents,
                   strides: dict[int, Scalar]) -> None:
    """Strides for the digits of one part of a split: contiguous from `stride`, innermost digit first."""
    for d in reversed(digits):
        strides[id(d)] = stride
        stride = stride * extents.of(d)


def _strided_split(t: Split, outer: Scalar, inner: Scalar, extents: _AllocationExtents) -> bool:
    """Whether index i of the split dimension sits at a fixed multiple of i."""
    inner_extent = extents.of(t.inner)
    return extents.of(t.outer).same_as(1) or inner_extent.same_as(1) or same_product(outer, inner * inner_extent)


def _split_stride(tv: TensorView, t: Split, outer: Scalar, inner: Scalar, extents: _AllocationExtents) -> Scalar:
    """The stride of a split dimension: index i sits at (i // f) * outer + (i % f) * inner = i * inner."""
    if extents.of(t.outer).same_as(1):
        return inner  # only the inner part ever moves
    if extents.of(t.inner).same_as(1):
        return outer
    if not _strided_split(t, outer, inner, extents):
        raise UnsupportedError(
            f"allocation domain of {tv.describe()} {TensorView.domain_text(tv.allocation)}: the split of "
            f"{t.inp.text()} by {t.factor} is no strided view (its outer part has stride {outer}, expected "
            f"{inner * t.factor}, its inner part's stride times the factor); braze writes only allocation "
            "domains that keep each split's outer part right outside its inner part"
        )
    return inner


def _factors(x: Scalar) -> tuple[int, Counter]:
    """`x` as a constant coefficient times a multiset of non-product factors."""
    if x.is_const:
        return x.value, Counter()
    if x.op != "*":
        return 1, Counter({x: 1})
    (ca, fa), (cb, fb) = _factors(x.args[0]), _factors(x.args[1])
    return ca * cb, fa + fb


def same_product(a: Scalar, b: Scalar) -> bool:
    """Whether two products are equal for every binding (same coefficient, same factors in any order)."""
    return _factors(a) == _factors(b)


def exact_quotient(a: Scalar, b: Scalar) -> Scalar | None:
    """`a / b` where `b` divides the product `a` for every binding (`a = b * q`), else None."""
    (ca, fa), (cb, fb) = _factors(a), _factors(b)
    if cb == 0 or ca % cb or fb - fa:  # `fb - fa` keeps the factors of b that a lacks
        return None
    quotient = _ONE
    for factor in (fa - fb).elements():
        quotient = quotient * factor
    return quotient * (ca // cb)


# --- the straight-line program of all of a fusion's shape and stride expressions ---------------------
@dataclass(frozen=True)
class Step:
    """One value of a shape program: an input extent, a constant, or an op over earlier steps."""

    op: str  # "input", "const", or a Scalar op (+ - * // % ceildiv min max)
    args: tuple[int, ...] = ()  # earlier step indices (ops) or (input position,) / (value,)
    text: str = ""  # the expression it computes, for error messages


@dataclass(frozen=True)
class ShapeProgram:
    """Expressions over named input extents, flattened with shared subexpressions computed once."""

    name: str
    symbols: tuple[str, ...]  # the input extents, in the order a shape function takes them
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]  # the step holding each output value

    @staticmethod
    def of(name: str, values: Sequence[Scalar | int], symbols: Sequence[str] | None = None) -> ShapeProgram:
        """The program computing `values`; `symbols` defaults to their free symbols, sorted."""
        values = [as_scalar(v) for v in values]
        if symbols is None:
            symbols = sorted(frozenset().union(*(v.free_symbols() for v in values)))
        builder = _ProgramBuilder(tuple(symbols))
        outputs = tuple(builder.step(v) for v in values)
        return ShapeProgram(name, tuple(symbols), tuple(builder.steps), outputs)

    def evaluate(self, extents: Sequence[int]) -> list[int]:
        """The outputs for `extents`, step by step in Python (slow; for tests and error messages)."""
        values: list[int] = []
        for step in self.steps:
            values.append(_evaluate_step(step, values, extents))
        return [values[i] for i in self.outputs]

    def explain_failure(self, extents: Sequence[int]) -> InputError:
        """The error for extents that make a step divide by zero."""
        values: list[int] = []
        for step in self.steps:
            try:
                values.append(_evaluate_step(step, values, extents))
            except ZeroDivisionError:
                bound = ", ".join(f"{n} = {e}" for n, e in zip(self.symbols, extents))
                return InputError(f"shapes of {self.name}: {step.text} divides by zero with {bound}")
        return InputError(f"shapes of {self.name}: the shape function failed for extents {list(extents)}")


class _ProgramBuilder:
    def __init__(self, symbols: tuple[str, ...]) -> None:
        self.position = {name: i for i, name in enumerate(symbols)}
        self.steps: list[Step] = []
        self.memo: dict[Scalar, int] = {}

    def step(self, x: Scalar) -> int:
        if x in self.memo:
            return self.memo[x]
        if x.is_const:
            step = Step("const", (x.value,), str(x))
        elif x.is_symbol:
            if x.name not in self.position:
                raise ValueError(f"shape program: symbol {x.name!r} is not among its inputs {sorted(self.position)}")
            step = Step("input", (self.position[x.name],), str(x))
        else:
            step = Step(x.op, tuple(self.step(a) for a in x.args), str(x))
        self.steps.append(step)
        self.memo[x] = len(self.steps) - 1
        return self.memo[x]


# Python's floor semantics, as `Scalar.evaluate` has them (the native code matches them).
_STEP_OPS: dict[str, Callable[[int, int], int]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv, "%": operator.mod,
    "ceildiv": lambda a, b: -(-a // b), "min": min, "max": max,
}


def _evaluate_step(step: Step, values: list[int], extents: Sequence[int]) -> int:
    if step.op == "const":
        return step.args[0]
    if step.op == "input":
        return int(extents[step.args[0]])
    a, b = (values[i] for i in step.args)
    return _STEP_OPS[step.op](a, b)


# --- running a shape program in Python ------------------------------------------------------------------
_PYTHON_OPS = {"+": "{} + {}", "-": "{} - {}", "*": "{} * {}", "//": "{} // {}", "%": "{} % {}",
               "ceildiv": "-(-{} // {})", "min": "min({}, {})", "max": "max({}, {})"}


def python_source(program: ShapeProgram) -> str:
    """A Python function `shapes(extents) -> list` computing the program's outputs."""
    lines = ["def shapes(e):"]
    names: list[str] = []
    for n, step in enumerate(program.steps):
        if step.op == "const":
            names.append(repr(step.args[0]))
            continue
        if step.op == "input":
            expr = f"e[{step.args[0]}]"
        else:
            expr = _PYTHON_OPS[step.op].format(*(names[i] for i in step.args))
        names.append(f"_t{n}")
        lines.append(f"    _t{n} = {expr}")
    lines.append(f"    return [{', '.join(names[i] for i in program.outputs)}]")
    return "\n".join(lines)


class PythonShapeFunction:
    """A shape program run by Python: the fallback when the host JIT is off or failed."""

    native = False

    def __init__(self, program: ShapeProgram) -> None:
        self.program = program
        scope: dict = {}
        exec(compile(python_source(program), f"<shapes of {program.name}>", "exec"), scope)  # noqa: S102
        self._run = scope["shapes"]

    def __call__(self, extents: Sequence[int]) -> list[int]:
        try:
            return self._run(extents)
        except ZeroDivisionError:
            raise self.program.explain_failure(extents) from None


class TieredShapeFunction:
    """A shape program run in Python on its first call and natively from the second on.

    A host program's first run is its fusion's first call on a description, where latency counts
    and one run gains nothing from native code: loading even a cached native function costs the
    process an LLVM engine, about 2 ms. Later runs (new extents, multi-segment programs on every
    call) take the native function, built at the second call."""

    def __init__(self, program: ShapeProgram) -> None:
        self.program = program
        self._python = PythonShapeFunction(program)
        self._called = False
        # From the second call (no bound method of self here: the object would be in a cycle).
        self._tiered: host_jit.NativeShapeFunction | PythonShapeFunction | None = None
        self._tiering = threading.Lock()  # racing threads build the native function once

    @property
    def native(self) -> bool:
        """Whether calls run native code (after the first call, unless the JIT failed)."""
        return getattr(self._tiered, "native", False)

    def __call__(self, extents: Sequence[int]) -> list[int]:
        tiered = self._tiered
        return tiered(extents) if tiered is not None else self._before_tiering(extents)

    def _before_tiering(self, extents: Sequence[int]) -> list[int]:
        if not self._called:
            self._called = True
            return self._python(extents)
        with self._tiering:
            if self._tiered is None:
                self._tiered = native_or_python(self.program)
        return self._tiered(extents)


def native_or_python(program: ShapeProgram) -> host_jit.NativeShapeFunction | PythonShapeFunction:
    """The native shape function for `program`, or the Python one where the JIT fails."""
    try:
        return host_jit.NativeShapeFunction(program)
    except Exception as error:  # any JIT failure: the Python function computes the same values
        host_jit.fall_back(f"the shapes of {program.name!r}", error)
        return PythonShapeFunction(program)


def shape_function(program: ShapeProgram) -> TieredShapeFunction | PythonShapeFunction:
    """The shape function for `program`: tiered up to native code, unless the host JIT is disabled
    or builtins are not made (a ctypes call would cost more than the Python function)."""
    if config.disabled("host_jit") or not host_jit.builtins_available():
        return PythonShapeFunction(program)
    return TieredShapeFunction(program)
