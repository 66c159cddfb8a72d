"""TensorView: a tensor of the Fusion IR, with logical, allocation and loop domains."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from braze.dtypes import DType
from braze.errors import FusionDefinitionError, TracerBoolConversionError
from braze.ir.domain import IterDomain, Merge, Reorder, Split, covers_exactly, merge, split
from braze.ir.scalar import Scalar

if TYPE_CHECKING:
    from braze.ir.fusion import Expr, FusionGraph


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Maps a possibly negative axis into [0, rank), or raises naming the axis and the rank. NumPy's
    integers are ints here (an axis from `np.argmax` or `np.int64(1)`); bools are not."""
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise FusionDefinitionError(f"{what}: expected an int, got {type(axis).__name__}")
    axis = int(axis)
    if not -rank <= axis < rank:
        raise FusionDefinitionError(f"{what}: expected an axis in [{-rank}, {rank}), got {axis}")
    return axis % rank


class Shape(tuple):
    """A tensor's extents: a tuple that may also be called, as nvFuser's `t.shape()` is a method, so a
    definition written for nvFuser (`broadcast_in_dim(b, t.shape(), [1])`) reads as it is."""

    __slots__ = ()

    def __call__(self) -> Shape:
        return self


class Val:
    """A value of the fusion graph: produced by one `Expr` (its definition) or a fusion input."""

    def __init__(self, fusion: FusionGraph, dtype: DType) -> None:
        self.fusion = fusion
        self.dtype = dtype
        self.definition: Expr | None = None
        self.name = fusion.new_name(self)


class TensorView(Val):
    """A tensor. Rank 0 tensors also stand for scalars: `scalar` is None, "input", "const",
    "literal" or "extent" (`value` is then the symbolic extent, a `Scalar`, read as int64).

    A scalar (a Python literal, `define_scalar`, an extent) is *weak*: it never widens a tensor's dtype.
    """

    def __init__(
        self,
        fusion: FusionGraph,
        logical: Sequence[IterDomain],
        dtype: DType,
        *,
        scalar: str | None = None,
        value: Any = None,
    ) -> None:
        super().__init__(fusion, dtype)
        self.logical: list[IterDomain] = list(logical)
        self.allocation: list[IterDomain] = list(self.logical)
        self.loop: list[IterDomain] = list(self.logical)
        self.transforms: list[Split | Merge | Reorder] = []
        self.scalar = scalar
        self.value = value
        self.label: str | None = None  # the user's name for an input ('x'), for error messages
        # Why a view may no longer be used: it was taken of a tensor written since (`x[0] = v`), and
        # NumPy's view would show the write, which this one, a value, does not (ops/view_composites.py)
        self.overwritten: str | None = None
        # A runtime Python number (an `@bz.jit` argument), or an elementwise op over such numbers and
        # literals only: as weak as a literal, and rounded to the promoted type first like one.
        self.python_scalar = False
        # An elementwise op over scalars alone, one of them typed (`1 - momentum` of a define_scalar):
        # a scalar still, as weak as a typed one, as nvFuser's scalar arithmetic gives a scalar.
        self.scalar_arithmetic = False

    # --- what the user sees -------------------------------------------------------------------
    @property
    def visible(self) -> list[IterDomain]:
        """The logical domain without reduction dimensions: the dimensions of the tensor's value."""
        return [d for d in self.logical if not d.is_reduction]

    @property
    def shape(self) -> Shape:
        """Extents of the visible dimensions, as symbolic Scalars."""
        return Shape(d.extent for d in self.visible)

    @property
    def ndim(self) -> int:
        return len(self.visible)

    @property
    def weak(self) -> int:
        """How weak the value is in type promotion: 0 a tensor, 1 a typed scalar, 2 a Python literal.

        Weak values never widen a stronger one's dtype."""
        if self.python_scalar:
            return 2
        if self.scalar_arithmetic:
            return 1
        if self.scalar is None and getattr(self.fusion, "torch_promotion", False) and not self.visible:
            return 1  # a 0-d tensor, under torch's promotion (Fusion.torch_promotion)
        return {None: 0, "input": 1, "const": 1, "extent": 1, "literal": 2}[self.scalar]

    @property
    def promotion(self) -> tuple[DType, int, bool]:
        """The operand `dtypes.result_type` promotes: the dtype, the weakness, and whether it is a
        0-d torch tensor (whose own dtype a category it raises takes, as in torch)."""
        zero_dim = self.scalar is None and not self.visible and getattr(self.fusion, "torch_promotion", False)
        return self.dtype, self.weak, zero_dim

    @property
    def is_constant(self) -> bool:
        """A scalar whose value is known while defining (a Python literal or `define_scalar(v)`)."""
        return self.scalar in ("const", "literal")

    def describe(self) -> str:
        """`T0 ('x')` for error messages."""
        return f"{self.name} ({self.label!r})" if self.label else self.name

    # --- loop-domain transforms (recorded, so any domain can be replayed onto another) ----------
    def split(self, axis: int, factor: Scalar | int) -> TensorView:
        """Splits loop dimension `axis` into (ceildiv(extent, factor), factor)."""
        self.fusion.check_definable("split of " + self.name)
        axis = normalize_axis(axis, len(self.loop))
        transform = split(self.loop[axis], factor)
        self.loop[axis : axis + 1] = [transform.outer, transform.inner]
        self.transforms.append(transform)
        return self

    def merge(self, axis: int) -> TensorView:
        """Merges loop dimensions `axis` and `axis + 1`."""
        self.fusion.check_definable("merge of " + self.name)
        axis = normalize_axis(axis, len(self.loop))
        if axis + 1 >= len(self.loop):
            raise FusionDefinitionError(f"merge: axis {axis} has no next loop dimension to merge with")
        transform = merge(self.loop[axis], self.loop[axis + 1])
        self.loop[axis : axis + 2] = [transform.out]
        self.transforms.append(transform)
        return self

    def reorder(self, old_to_new: dict[int, int]) -> TensorView:
        """Moves loop dimension `old` to position `new` for each pair; the rest keep their order."""
        self.fusion.check_definable("reorder of " + self.name)
        rank = len(self.loop)
        moves = {normalize_axis(o, rank, "reorder"): normalize_axis(n, rank, "reorder") for o, n in old_to_new.items()}
        if len(set(moves.values())) != len(moves):
            raise FusionDefinitionError(f"reorder: expected distinct destinations, got {old_to_new}")
        free_slots = iter(p for p in range(rank) if p not in moves.values())
        permutation = tuple(moves[i] if i in moves else next(free_slots) for i in range(rank))
        new_loop: list[IterDomain | None] = [None] * rank
        for old, new in enumerate(permutation):
            new_loop[new] = self.loop[old]
        self.loop = new_loop  # type: ignore[assignment]
        self.transforms.append(Reorder(permutation))
        return self

    # --- memory layout ---------------------------------------------------------------------------
    def set_allocation_domain(self, domain: Sequence[IterDomain]) -> TensorView:
        """Sets the memory layout: dimensions derived from the logical domain, outermost first."""
        self.fusion.check_definable("set_allocation_domain of " + self.name)
        domain = list(domain)
        if not covers_exactly(domain, self.visible):
            raise FusionDefinitionError(
                f"set_allocation_domain of {self.name}: expected dimensions that cover the logical domain "
                f"{self.domain_text(self.logical)} exactly once, got {self.domain_text(domain)}"
            )
        self.allocation = domain
        return self

    @property
    def has_default_allocation(self) -> bool:
        """True when memory is laid out row-major in logical order."""
        allocation = [d for d in self.allocation if not d.is_reduction]
        return [id(d) for d in allocation] == [id(d) for d in self.visible]

    def set_stride_order(self, stride_order: Sequence[int]) -> TensorView:
        """`stride_order[i]` is the rank of dimension i's stride, 0 the fastest (NCHW + (3,0,2,1) = NHWC)."""
        visible = self.visible
        order = tuple(stride_order)
        if sorted(order) != list(range(len(visible))):
            raise FusionDefinitionError(
                f"stride_order of {self.describe()}: expected a permutation of 0..{len(visible) - 1}, got {order}"
            )
        by_speed = sorted(range(len(visible)), key=lambda i: -order[i])  # outermost (slowest) first
        return self.set_allocation_domain([visible[i] for i in by_speed])

    @property
    def stride_order(self) -> tuple[int, ...] | None:
        """The stride order of a permuted allocation domain, or None for plain row-major."""
        visible = self.visible
        if self.has_default_allocation:
            return None
        allocation = [d for d in self.allocation if not d.is_reduction]
        positions = {id(d): p for p, d in enumerate(allocation)}
        if not all(id(d) in positions for d in visible):
            return None  # split/merge layouts have no plain stride order
        return tuple(len(visible) - 1 - positions[id(d)] for d in visible)

    @staticmethod
    def domain_text(domain: Sequence[IterDomain]) -> str:
        return "[" + ", ".join(d.text() for d in domain) + "]"

    def type_text(self) -> str:
        """`float32[T0_s0, 4]`: the dtype and the logical domain."""
        return f"{self.dtype.name}{self.domain_text(self.logical)}"

    def __repr__(self) -> str:
        return f"TensorView({self.name}: {self.type_text()})"

    def __bool__(self) -> bool:
        raise TracerBoolConversionError(
            f"bool({self.name}): expected a Python value, got a traced tensor: it has no truth value while "
            "a fusion is being defined, so Python control flow (if, while, and/or) cannot depend on "
            "its data; use bz.ops.where for a choice per element")

    def __iter__(self):
        raise TypeError(f"{self.name} is symbolic: slice it instead of iterating over it, or take its pieces with "
                        "x.unbind(dim), x.split(size, dim=d) or x.chunk(n, dim=d); x.max(dim=d) gives "
                        "(values, indices)")
