"""The names a `@bz.kernel` body uses: array parameter types, `ndrange`, `grouped`, `static`, atomics,
`cast`, `bz.math` and `@bz.func`. The AST frontend (braze.frontend.kernel_ast) recognises these objects; called from
plain Python, those that have a meaning outside a kernel work as Python.
"""

from __future__ import annotations

import functools
import itertools
import math as pymath
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from braze import dtypes as dt
from braze.dtypes import DType
from braze.errors import KernelSyntaxError
from braze.frontend import kernel_math as km
from braze.frontend.kernel_vectors import METHODS as VECTOR_FUNCTIONS
from braze.frontend.kernel_vectors import VectorType, component_max, component_min
from braze.ops.elementwise import BINARY, TERNARY, UNARY


@dataclass(frozen=True)
class ArrayType:
    """The annotation `bz.Array[dtype, ndim]`; a part left out is taken from the argument.

    `bz.Array[bz.vec3, ndim]` (an `element` type) is an array of vectors: the argument is an array of
    `element.dtype` with the element's axes last, (n, 3) for `bz.Array[bz.vec3, 1]`."""

    dtype: DType | None = None
    ndim: int | None = None
    element: VectorType | None = None

    def __repr__(self) -> str:
        kind = repr(self.element) if self.element else repr(self.dtype) if self.dtype else "?"
        return f"bz.Array[{kind}, {self.ndim if self.ndim is not None else '?'}]"


class _ArrayTypes:
    """`bz.Array`, `bz.Array[dtype]` and `bz.Array[dtype, ndim]` (dtype may be a vector type: `bz.vec3`)."""

    def __getitem__(self, spec) -> ArrayType:
        dtype, ndim = spec if isinstance(spec, tuple) else (spec, None)
        if isinstance(dtype, VectorType):
            return ArrayType(dtype.dtype, ndim, dtype)
        return ArrayType(None if dtype is None else dt.as_dtype(dtype), ndim)

    def __repr__(self) -> str:
        return "bz.Array"


Array = _ArrayTypes()


def ndrange(*extents) -> Iterator[tuple[int, ...]]:
    """`for i, j in bz.ndrange(n, m)`: every index pair; an extent may be a `(begin, end)` pair."""
    ranges = [range(*e) if isinstance(e, tuple) else range(e) for e in extents]
    return itertools.product(*ranges)


def grouped(loop) -> Iterator[np.ndarray]:
    """`for I in bz.grouped(bz.ndrange(n, m))` (or over `range(n)`, or `bz.grouped(a)` over an array's
    indices, Taichi's `ti.grouped`): I is the index as one integer vector (a `bz.vec2l`), so `a[I]`,
    `I[0]` and `I + offset` work. At the top level of a kernel it is the parallel loop it wraps;
    `bz.static(bz.grouped(bz.ndrange((-1, 2), (-1, 2))))` unrolls a stencil's offsets. Outside a
    kernel, the indices as NumPy int64 arrays."""
    if isinstance(loop, np.ndarray):
        loop = ndrange(*loop.shape)
    elif isinstance(loop, range):
        loop = ((i,) for i in loop)
    return (np.array(index, np.int64) for index in loop)


def cast(value, dtype):
    """`bz.cast(x, dtype)`: a number or vector converted to `dtype` (`int`, `float`, `bz.int32`, ...;
    floats to integers truncate, as C's and Taichi's casts do); `v.cast(dtype)` in a kernel too.
    Outside a kernel, NumPy's `astype`."""
    return np.asarray(value).astype(dt.as_dtype(dtype).numpy)


def serial(loop):
    """`for c in bz.serial(range(n))` (or over a `bz.ndrange`): at the top level of a kernel, a loop that
    runs in order on one thread, as a serial task, and sees the locals set before it, as a prefix sum's
    running total needs; every other top-level loop is a parallel task. Outside a kernel, the loop itself."""
    return loop


def static(value):
    """Marks a value as known at compile time: `if bz.static(c)` picks a branch, `for v in bz.static(s)` unrolls."""
    return value


def _kernel_only(name: str) -> Callable:
    def outside(*args, **kwargs):
        raise KernelSyntaxError(f"bz.{name} can only be called inside a @bz.kernel")

    outside.__name__ = name
    outside.kernel_atomic = name.removeprefix("atomic_")
    return outside


atomic_add = _kernel_only("atomic_add")
atomic_sub = _kernel_only("atomic_sub")
atomic_min = _kernel_only("atomic_min")
atomic_max = _kernel_only("atomic_max")


def local(dtype, size: int) -> np.ndarray:
    """`buf = bz.local(bz.float32, 8)`: a per-thread array of `size` elements (a compile-time constant),
    zeroed where it is made; `bz.local(bz.vec3, 8)` holds eight vec3s (`buf[j]` is one, `buf[j].x`
    a component). Kept in registers when every index is a constant (the compilers promote it);
    outside a kernel, a zeroed NumPy array ((8, 3) for the vec3s)."""
    if isinstance(dtype, VectorType):
        return np.zeros((size, *dtype.shape), dtype.dtype.numpy)
    return np.zeros(size, dt.as_dtype(dtype).numpy)


class MathFunction:
    """`bz.math.<op>`: an op of the op table, usable in kernels (and on NumPy values outside)."""

    def __init__(self, op: str, reference: Callable) -> None:
        self.op, self.reference = op, reference
        self.__name__ = op

    def __call__(self, *args):
        if self.op in ROUNDINGS and len(args) == 2:  # bz.math.floor(p, int), as in kernels
            return self.reference(np.asarray(args[0])).astype(dt.as_dtype(args[1]).numpy)
        return self.reference(*[np.asarray(a) for a in args])

    def __repr__(self) -> str:
        return f"bz.math.{self.op}"


# Taichi's ti.floor(x, int), ti.ceil(x, dt) and ti.round(x, dt): rounded, then converted to the dtype.
ROUNDINGS = ("floor", "ceil", "round", "trunc")


def _one_or_two(pairwise: Callable, of_one_vector: Callable) -> Callable:
    """`bz.math.max(a, b)` elementwise; `bz.math.max(v)` the largest component of v (as in kernels)."""
    return lambda *args: of_one_vector(*args) if len(args) == 1 else pairwise(*args)


class _MathNamespace:
    """The op table's unary, binary and ternary functions, as `bz.math.sin`, `bz.math.atan2`, ...; the
    functions of Python's `math` module the table composes (`bz.math.acos`, `bz.math.hypot`), `min` and
    `max`, and Python's `math` constants (`bz.math.pi`), so that `bz.math` serves where `math` would; and the
    vector and matrix functions (`bz.math.dot`, `bz.math.trace`, braze/frontend/kernel_vectors.py)."""

    pi, e, tau, inf, nan = pymath.pi, pymath.e, pymath.tau, pymath.inf, pymath.nan

    def __init__(self) -> None:
        for table in (UNARY, BINARY, TERNARY):
            for name, (_, _, reference) in table.items():
                setattr(self, name, MathFunction(name, reference))
        for name, reference in km.REFERENCES.items():
            setattr(self, name, MathFunction(name, reference))
        self.min = MathFunction("minimum", _one_or_two(np.minimum, component_min))
        self.max = MathFunction("maximum", _one_or_two(np.maximum, component_max))
        for name, function in VECTOR_FUNCTIONS.items():  # bz.math.dot, bz.math.norm, ... (max and min of one
            if not hasattr(self, name):                   # vector are its largest and smallest components)
                setattr(self, name, function)

    def __repr__(self) -> str:
        return "bz.math"


math = _MathNamespace()


class KernelFunc:
    """A `@bz.func` helper: inlined where a kernel calls it; a plain function when called from Python."""

    def __init__(self, fn: Callable) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def func(fn: Callable) -> KernelFunc:
    """Decorates a helper that kernels call; its body is inlined at each call."""
    return KernelFunc(fn)
