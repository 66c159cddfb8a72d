"""Kernel IR (docs/architecture.md, "Kernel IR and code generation"): what both frontends lower to
and both code generators read.

A `Kernel` is parameters plus tasks; each `Task` is one top-level loop (a launch on a GPU, a
parallel-for on the CPU). Expressions are immutable and hashable, so passes can compare and
deduplicate them structurally. Arithmetic nodes name their op by its op-table name ("add",
"exp", ...); the code generators look up how to emit it.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from braze.dtypes import DType, bool_, int64


# --- parameters ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArrayParam:
    """An array argument: data pointer, extents and strides (in elements).

    `static_strides[k]` is a stride known at compile time (1 for a contiguous innermost dimension,
    0 for a broadcast one) or None when it is read at run time.
    """

    name: str
    dtype: DType
    ndim: int
    static_strides: tuple[int | None, ...] = ()

    def static_stride(self, axis: int) -> int | None:
        return self.static_strides[axis] if self.static_strides else None


@dataclass(frozen=True)
class ScalarParam:
    name: str
    dtype: DType


Param = ArrayParam | ScalarParam


# --- expressions ----------------------------------------------------------------------------------
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
"""Every live expression by its structural key: building an expression equal to a live one returns that
one (hash-consing), so a value built twice is one node and the IR is a DAG of distinct nodes."""


class _Interned(type):
    """Metaclass of expressions: construction goes through `_LIVE`."""

    def __call__(cls, *args, **kwargs):
        node = super().__call__(*args, **kwargs)
        try:
            return _LIVE.setdefault(node._key(), node)
        except TypeError:  # an unhashable constant: left as it is
            return node


def _constant_key(value: Any) -> Any:
    """A constant's value told apart from equal values of other types and from -0.0 (and NaN equal to
    itself), which Python's == would merge."""
    return value.hex() if isinstance(value, float) else value


class Expr(metaclass=_Interned):
    """Base of expressions; every expression has a dtype.

    Expressions are interned (see `_LIVE`) and cache their hash, so hashing and comparing one costs
    the same whatever the size of the DAG below it: the children of an interned node are themselves
    interned, and equal children are the same object.
    """

    dtype: DType

    def _key(self) -> tuple:
        cls = type(self)
        return (cls, *(getattr(self, name) for name in cls.__dataclass_fields__))

    def __hash__(self) -> int:
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = hash(self._key())
            object.__setattr__(self, "_hash", h)
            return h

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not type(self):
            return NotImplemented
        return hash(self) == hash(other) and self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __reduce__(self) -> tuple:
        # Rebuilt through the constructor: a copy or an unpickled expression is interned too (and its
        # cached hash, only good in this process, is computed again).
        return type(self), tuple(getattr(self, name) for name in type(self).__dataclass_fields__)


_expr = dataclass(frozen=True, eq=False)  # equality and hashing come from Expr


@_expr
class Const(Expr):
    value: Any
    dtype: DType

    def _key(self) -> tuple:
        return (Const, type(self.value), _constant_key(self.value), self.dtype)


@_expr
class Var(Expr):
    """A loop index or a local variable."""

    name: str
    dtype: DType = int64


@_expr
class ScalarRef(Expr):
    param: ScalarParam

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.param.dtype


@_expr
class ArrayExtent(Expr):
    param: ArrayParam
    axis: int
    dtype: DType = int64


@_expr
class ArrayStride(Expr):
    param: ArrayParam
    axis: int
    dtype: DType = int64


@_expr
class Load(Expr):
    """`param[indices]`: one index per dimension."""

    param: ArrayParam
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.param.dtype


@_expr
class LoadLocal(Expr):
    """Element `index` of a local array made by `Alloc`."""

    array: Var
    index: Expr
    dtype: DType


@_expr
class Unary(Expr):
    op: str
    x: Expr
    dtype: DType
    attrs: tuple[tuple[str, Any], ...] = ()


@_expr
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: DType


@_expr
class Ternary(Expr):
    op: str  # "where" (select), "clamp", "lerp", "fma"
    a: Expr
    b: Expr
    c: Expr
    dtype: DType


@_expr
class Cast(Expr):
    x: Expr
    dtype: DType


@_expr
class Philox(Expr):
    """One 32-bit word of the Philox4x32-10 stream (see braze.ops.philox): counter group, word."""

    seed: Expr
    offset: Expr
    group: Expr
    word: Expr  # 0..3
    dtype: DType = int64


# --- statements ---------------------------------------------------------------------------------
class Stmt:
    """Base of statements."""


@dataclass(frozen=True)
class Let(Stmt):
    """Defines local variable `var` (it may be reassigned with `Assign`)."""

    var: Var
    value: Expr


@dataclass(frozen=True)
class Assign(Stmt):
    var: Var
    value: Expr


@dataclass(frozen=True)
class Store(Stmt):
    param: ArrayParam
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True)
class StoreLocal(Stmt):
    array: Var
    index: Expr
    value: Expr


@dataclass(frozen=True)
class AtomicRMW(Stmt):
    """`result = param[indices]; param[indices] = op(result, value)` atomically; result may be None."""

    op: str  # add, sub, min, max
    param: ArrayParam
    indices: tuple[Expr, ...]
    value: Expr
    result: Var | None = None


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()


@dataclass(frozen=True)
class For(Stmt):
    """A serial loop: `for var in range(begin, end, step)`."""

    var: Var
    begin: Expr
    end: Expr
    body: tuple[Stmt, ...]
    step: int = 1
    vectorize: bool = False  # a hint: the code generator may vectorize this innermost loop


@dataclass(frozen=True)
class While(Stmt):
    cond: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Break(Stmt):
    pass


@dataclass(frozen=True)
class Continue(Stmt):
    pass


@dataclass(frozen=True)
class Alloc(Stmt):
    """A local (per-thread) or shared (per-block) array of `size` elements."""

    var: Var
    dtype: DType
    size: int
    memory: str = "local"


@dataclass(frozen=True)
class Sync(Stmt):
    pass


@dataclass(frozen=True)
class Assert(Stmt):
    """Stops the running thread when `cond` is false, after writing the message's number into the
    kernel's status array (see `ASSERT_STATUS` and `assert_messages`)."""

    cond: Expr
    message: str


def kept(node: object, name: str, make: Callable[[Any], Any]) -> Any:
    """`make(node)`, computed once and kept on `node` under `name`. Kernel IR is immutable, so what an
    analysis finds in a node holds as long as the node lives, and planning asks the same questions of
    the same tasks and statements many times. Only for answers that depend on the node alone: not on a
    knob, nor on where the node is used. A node rebuilt with `dataclasses.replace` keeps nothing."""
    try:
        return node.__dict__[name]
    except KeyError:
        value = make(node)
        object.__setattr__(node, name, value)
        return value


# --- kernels --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    """One top-level loop. `range_for` runs `body` for var in [begin, end) in parallel; `serial`
    runs `body` once."""

    name: str
    kind: str  # "range_for" or "serial"
    body: tuple[Stmt, ...]
    var: Var | None = None
    begin: Expr = Const(0, int64)
    end: Expr = Const(1, int64)
    block_dim: int | None = None
    # Elements of work one index of the range does, for the CPU runtime's split across threads
    # (None: the extent of the body's last top-level loop).
    work: Expr | None = None
    # A tile task (braze/lower/tiles.py): each index of the range writes one tile of `tile` rows and
    # columns, its body one loop over the tile's rows around one over its columns; 0 for other tasks.
    tile: int = 0


@dataclass(frozen=True)
class Kernel:
    name: str
    params: tuple[Param, ...]
    tasks: tuple[Task, ...]
    source: str = ""  # where the kernel came from (a fusion's name, a Python file:line)
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    # The type of the kernel's index arithmetic (loop indices, extents, offsets): int32 when every
    # index of every call it serves fits (engine.index_type), which halves the integer work on a GPU.
    index_type: DType = int64
    # The scalar parameters that carry array extents (a fusion's extent symbols): never negative.
    extents: frozenset[str] = frozenset()


TRUE = Const(True, bool_)

ASSERT_STATUS = "assert_status"
"""The name of the int64[1] array parameter a kernel with `Assert`s must have. A failing assert
stores 1 + the index of its message in `assert_messages(kernel)` there; the runtime reads it back."""


def _stmt_children(s: Stmt) -> tuple[Stmt, ...]:
    if isinstance(s, If):
        return s.then + s.orelse
    if isinstance(s, (For, While)):
        return s.body
    return ()


def assert_messages(kernel: Kernel) -> tuple[str, ...]:
    """The distinct messages of the kernel's asserts, in program order (tasks, then statements)."""
    found: dict[str, None] = {}

    def visit(stmts: tuple[Stmt, ...]) -> None:
        for s in stmts:
            if isinstance(s, Assert):
                found.setdefault(s.message)
            visit(_stmt_children(s))

    for task in kernel.tasks:
        visit(task.body)
    return tuple(found)


def substitute(e: Expr, old: Var, new: Expr) -> Expr:
    """`e` with every read of `old` replaced by `new`."""
    if e == old:
        return new
    changes = {}
    for name in getattr(e, "__dataclass_fields__", {}):
        child = getattr(e, name)
        if isinstance(child, Expr):
            changes[name] = substitute(child, old, new)
        elif isinstance(child, tuple) and any(isinstance(c, Expr) for c in child):
            changes[name] = tuple(substitute(c, old, new) if isinstance(c, Expr) else c for c in child)
    return dataclasses.replace(e, **changes) if changes else e
