"""What names in a `@bz.kernel` body stand for, and where its source came from (for errors)."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from braze.errors import KernelSyntaxError
from braze.kir import nodes as k

# CPython 3.11's ast.parse keeps its recursion count in state shared by the interpreter: two threads
# parsing at once (first calls of two kernels) can fail with "AST constructor recursion depth mismatch".
_PARSING = threading.Lock()


# --- what a name can stand for ----------------------------------------------------------------------
@dataclass(frozen=True)
class ArrayHandle:
    """An array parameter's name: subscripts read and write it, `.shape` gives its extents.

    An array of vectors or matrices (`bz.Array[bz.vec3, 1]`) has `element` set: its parameter is the
    backing array, with the element's axes last ((n, 3) for n vec3s)."""

    param: k.ArrayParam
    element: object = None  # a kernel_vectors.VectorType, or None for scalars

    @property
    def ndim(self) -> int:
        """The dimensions the kernel indexes (the backing array's, less the element's)."""
        return self.param.ndim - (len(self.element.shape) if self.element is not None else 0)


@dataclass(frozen=True)
class ShapeHandle:
    """`a.shape`: only indexed by a constant axis."""

    param: k.ArrayParam
    ndim: int


@dataclass(frozen=True)
class LocalArray:
    """`buf = bz.local(bz.float32, 8)`: a per-thread array of a fixed size (a Kernel IR `Alloc`);
    `bz.local(bz.vec3, 8)` an array of vectors, `buf[j]` a vec3."""

    var: k.Var  # its dtype is the element dtype (a vector's components are stored one after another)
    size: int  # elements (vectors, for an array of vectors)
    element: object = None  # a kernel_vectors.VectorType, or None for scalars

    def component_indices(self, index: k.Expr) -> tuple[k.Expr, ...]:
        """Where the element at `index` is stored: one place for a scalar, one per component of a vector."""
        if self.element is None:
            return (index,)
        n = self.element.size
        if isinstance(index, k.Const):
            return tuple(k.Const(int(index.value) * n + c, index.dtype) for c in range(n))
        first = k.Binary("mul", index, k.Const(n, index.dtype), index.dtype)
        return tuple(first if c == 0 else k.Binary("add", first, k.Const(c, index.dtype), index.dtype)
                     for c in range(n))


@dataclass(frozen=True)
class VectorValue:
    """A `bz.vec3`, `bz.mat33`, ... value: its components, each a scalar Kernel IR expression (row-major
    for matrices). Vectors exist only in the frontend: every operation on one is an operation on its
    components, so the Kernel IR, task fusion and both code generators see scalars only.

    `origin` is (array, indices) when the value was read from an array of vectors, so that a
    component chosen at run time (`x[i][j]`) is a load of the array rather than a select."""

    type: object  # a kernel_vectors.VectorType
    items: tuple  # of k.Expr
    origin: tuple | None = None

    @property
    def type_name(self) -> str:
        return repr(self.type)


@dataclass(frozen=True)
class TableRow:
    """`E[q]` of a constant table of several axes at a run-time `q`: only its subscript (`E[q][0]`, the
    Python spelling of `E[q, 0]` over a tuple of tuples) is a value."""

    table: object
    keys: tuple


@dataclass(frozen=True)
class VectorLocal:
    """A local variable holding a vector or matrix: one Kernel IR variable per component."""

    type: object
    vars: tuple  # of k.Var

    def value(self) -> VectorValue:
        return VectorValue(self.type, self.vars)


@dataclass(frozen=True)
class LocalTuple:
    """A local holding a tuple or list of values (Taichi's `w = [0.5 * (1.5 - fx) ** 2, ...]`): each item
    is a hidden local of its own, so a later store to an array it was read from does not change it."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class Local:
    """A local variable of a task (or of an inlined helper)."""

    var: k.Var
    loop_index: bool = False  # loop indices are read-only
    from_literal: bool = False  # first set from a Python literal (`acc = 0.0`): wider values of its kind widen it


@dataclass
class Source:
    """One Python function's source: for error messages and global lookups."""

    fn: Callable
    tree: ast.FunctionDef
    file: str
    first_line: int
    lines: list[str]
    names: dict  # closure values, then globals

    @staticmethod
    def of(fn: Callable) -> Source:
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError) as error:
            raise KernelSyntaxError(f"{getattr(fn, '__name__', fn)}: cannot read its source ({error}); braze "
                                    "compiles a kernel from its Python source: define it in a file (a module or "
                                    "a script), or in an IPython or Jupyter cell, not with `python -c` or at the "
                                    "plain interactive prompt") from None
        with _PARSING:
            tree = ast.parse(textwrap.dedent("".join(lines)))
        closure = {name: cell.cell_contents for name, cell in
                   zip(fn.__code__.co_freevars, fn.__closure__ or ()) if _filled(cell)}
        return Source(fn, tree.body[0], inspect.getsourcefile(fn) or "<unknown>", first, lines,
                      {**fn.__globals__, **closure})

    def where(self, node: ast.AST) -> tuple[str, str]:
        """("file:line: ", the source line) of a node."""
        line = getattr(node, "lineno", 1)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return f"{self.file}:{self.first_line + line - 1}: ", text


def _filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # a closure variable not assigned yet
        return False
    return True


@dataclass
class FunctionScope:
    """The names visible in one function body: a task's, or an inlined helper's."""

    source: Source
    names: dict = field(default_factory=dict)
    outer: dict = field(default_factory=dict)  # the kernel's parameters and aliases (tasks only)


_PURE = (k.Const, k.Var, k.ScalarRef, k.ArrayExtent, k.ArrayStride, k.Unary, k.Binary, k.Ternary, k.Cast)


def reads_no_memory(e: k.Expr) -> bool:
    """Whether `e` is arithmetic of locals, parameters and extents alone: no store can change its value
    (a load's value changes where the element is written)."""
    if not isinstance(e, _PURE):
        return False
    return all(reads_no_memory(getattr(e, f)) for f in ("x", "a", "b", "c") if isinstance(getattr(e, f, None), k.Expr))


@functools.lru_cache(maxsize=256)
def assignments(tree: ast.AST) -> Counter:
    """How many times the function `tree` assigns each name (`r = ...`, `r += ...`, `for r in ...`, and
    `v.fill(x)`, which assigns the vector v)."""
    return Counter([n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)] +
                   [n.func.value.id for n in ast.walk(tree) if isinstance(n, ast.Call) and
                    isinstance(n.func, ast.Attribute) and n.func.attr == "fill" and isinstance(n.func.value, ast.Name)])


HOST_OPS = ("add", "sub", "mul", "floordiv", "remainder", "minimum", "maximum")


def host_evaluable(e) -> bool:
    """Computable on the host before a launch: constants, scalar parameters, extents, integer arithmetic."""
    if not isinstance(e, k.Expr):
        return isinstance(e, (int, bool))
    if isinstance(e, (k.Const, k.ScalarRef, k.ArrayExtent)):
        return not e.dtype.is_floating
    if isinstance(e, k.Cast):
        return e.dtype.is_integer and host_evaluable(e.x)
    if isinstance(e, k.Binary) and e.op in HOST_OPS:
        return host_evaluable(e.a) and host_evaluable(e.b)
    if isinstance(e, k.Unary) and e.op == "neg":
        return host_evaluable(e.x)
    return False
