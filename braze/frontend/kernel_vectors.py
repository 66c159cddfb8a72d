"""Small vectors and matrices in `@bz.kernel`s: `bz.vec2/3/4`, `bz.mat22/33/44` (float32) and their
float64 forms `bz.vec3d`, `bz.mat33d`, ..., as values and as array elements; integer vectors
`bz.vec2i/3i/4i` (int32, also `bz.ivec2/3/4`) and `bz.vec2l/3l/4l` (int64: a `bz.grouped` loop's
index, `v.cast(int)`), and the bool vectors `bz.vec2b/3b/4b` a comparison of vectors gives.

    @bz.kernel
    def fall(x: bz.Array[bz.vec3, 1], v: bz.Array[bz.vec3, 1], dt: bz.float32):
        for i in range(x.shape[0]):
            v[i] += bz.vec3(0.0, -9.81, 0.0) * dt
            x[i] += v[i] * dt

A vector is scalarised in the frontend: `VectorValue` holds one scalar Kernel IR expression per
component, and every operation below is written once over components. The same component code
runs on NumPy values when the functions are called from Python (elementwise over leading axes),
which makes them their own reference, bit for bit in float32: both sides round after every
operation and neither contracts `a * b + c` into a fused multiply-add.

An array of vectors is the array with the element's axes last: `bz.Array[bz.vec3, 1]` takes an
(n, 3) float32 array (no copy), `bz.Array[bz.mat33, 1]` an (n, 3, 3) one. `x[i]` is a vec3,
`x[i].y`, `x[i][1]` and `x[i, 1]` its second component.

Operators: `+ -` (vectors and matrices of one shape, or a scalar on either side), `*` and `/`
(by a scalar; vectors also component by component), unary `-`, `@` (matrix-matrix,
matrix-vector, vector-matrix; vector-vector is `dot`). `*` of two matrices is an error: write `@`.
An integer scalar takes the vector's dtype; a float64 scalar with a float32 vector gives the
float64 vector type. Integer and bool vectors compute component by component as their scalars
would (`I + 1`, `I // 2`, `I * 0.5`, `p - I` of a float vector p is p's type); comparisons give bool
vectors (`(I >= 0).all()`).

Functions (`bz.dot`, `bz.math.trace`, ...) are also methods under the names of METHODS, Taichi's among
them: `v.norm()`, `v.dot(w)`, `v.normalized()`, `m.trace()`, `v.max()` (kernel_calls.py dispatches them).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

import numpy as np

from braze import dtypes as dt
from braze.dtypes import DType
from braze.errors import InputError
from braze.frontend import kernel_types as ty
from braze.frontend.kernel_scope import VectorValue
from braze.kir import nodes as k


class VectorType:
    """A small vector or matrix type (`bz.vec3`, `bz.mat33d`, ...): a constructor in kernels and in
    Python (where it gives a NumPy array), and an element type of `bz.Array[...]`."""

    def __init__(self, name: str, shape: tuple[int, ...], dtype: DType) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype
        self.size = math.prod(shape)
        self.__name__ = name

    @property
    def is_matrix(self) -> bool:
        return len(self.shape) == 2

    def __repr__(self) -> str:
        return f"bz.{self.name}"

    def __call__(self, *args) -> np.ndarray:
        """The value as a NumPy array: `bz.vec3(1, 2, 3)`, `bz.vec3()` (zeros), `bz.vec3(s)` (filled),
        `bz.mat22(a, b, c, d)` (row-major) or `bz.mat22(row0, row1)`."""
        try:
            items = construct_items(self, [np.asarray(a) for a in args], lambda v: np.asarray(v, self.dtype.numpy))
        except ty.TypeProblem as problem:
            raise InputError(str(problem)) from None
        return np.array(items, self.dtype.numpy).reshape(self.shape)

    def zero(self) -> np.ndarray:
        """The vector or matrix of zeros (Taichi's `vec3.zero()`; also `bz.vec3()`)."""
        return np.zeros(self.shape, self.dtype.numpy)

    def identity(self) -> np.ndarray:
        """The identity matrix."""
        if not self.is_matrix:
            raise InputError(f"{self!r}.identity(): {self!r} is not a matrix type")
        return np.eye(self.shape[0], dtype=self.dtype.numpy)


def construct_items(vtype: VectorType, args: list, convert: Callable) -> list:
    """The components of `vtype(*args)`, each passed through `convert`: no argument (zeros), one scalar
    (a vector filled with it), every component (row-major), or one vector per matrix row (or one
    vector or matrix of the same shape, converted)."""
    flat = []
    for a in args:
        flat.extend(_components(a))
    if not args:
        flat = [0] * vtype.size
    elif len(flat) == 1 and not vtype.is_matrix:
        flat = flat * vtype.size
    if len(flat) != vtype.size:
        raise ty.TypeProblem(f"{vtype!r}: expected {vtype.size} components (or none, or one scalar"
                             f"{'' if not vtype.is_matrix else ' for a vector'}), got {len(flat)}")
    return [convert(v) for v in flat]


def _components(a) -> list:
    if isinstance(a, VectorValue):
        return list(a.items)
    if isinstance(a, np.ndarray) and a.ndim > 0:
        return list(a.reshape(-1))
    return [a]


_TYPES: dict[tuple[tuple[int, ...], str], VectorType] = {}


def _define(name: str, shape: tuple[int, ...], dtype: DType) -> VectorType:
    _TYPES[(shape, dtype.name)] = VectorType(name, shape, dtype)
    return _TYPES[(shape, dtype.name)]


vec2, vec3, vec4 = (_define(f"vec{n}", (n,), dt.float32) for n in (2, 3, 4))
vec2d, vec3d, vec4d = (_define(f"vec{n}d", (n,), dt.float64) for n in (2, 3, 4))
mat22, mat33, mat44 = (_define(f"mat{n}{n}", (n, n), dt.float32) for n in (2, 3, 4))
mat22d, mat33d, mat44d = (_define(f"mat{n}{n}d", (n, n), dt.float64) for n in (2, 3, 4))
vec2i, vec3i, vec4i = (_define(f"vec{n}i", (n,), dt.int32) for n in (2, 3, 4))  # Warp's names; Taichi's ivec3
vec2l, vec3l, vec4l = (_define(f"vec{n}l", (n,), dt.int64) for n in (2, 3, 4))
vec2b, vec3b, vec4b = (_define(f"vec{n}b", (n,), dt.bool_) for n in (2, 3, 4))
ivec2, ivec3, ivec4 = vec2i, vec3i, vec4i
# The index of `bz.grouped` over one axis (Taichi's 1-vector `I` of a 1-D field), and what it compares to.
for _dtype, _suffix in ((dt.int32, "i"), (dt.int64, "l"), (dt.bool_, "b")):
    _define(f"vec1{_suffix}", (1,), _dtype)


def type_of_shape(shape: tuple[int, ...], dtype: DType) -> VectorType:
    """The vector or matrix type of `shape` and `dtype`; a TypeProblem when braze has none."""
    found = _TYPES.get((shape, dtype.name))
    if found is None:
        raise ty.TypeProblem(f"no vector or matrix type of shape {shape} and {dtype.name} (braze has "
                             "vec2/3/4 and mat22/33/44 in float32 and float64, and vec2/3/4 in int32, int64 "
                             "and bool)")
    return found


# --- component arithmetic, on Kernel IR and on NumPy alike ---------------------------------------
class _KernelMath:
    """Arithmetic on Kernel IR components."""

    add = staticmethod(lambda a, b: ty.binary("add", a, b))
    sub = staticmethod(lambda a, b: ty.binary("sub", a, b))
    mul = staticmethod(lambda a, b: ty.binary("mul", a, b))
    div = staticmethod(lambda a, b: ty.binary("truediv", a, b))
    neg = staticmethod(lambda a: ty.unary("neg", a))
    sqrt = staticmethod(lambda a: ty.unary("sqrt", a))
    positive = staticmethod(lambda a: ty.binary("gt", a, 0))
    select = staticmethod(lambda c, a, b: ty.ternary("where", c, a, b))
    maximum = staticmethod(lambda a, b: ty.binary("maximum", a, b))
    minimum = staticmethod(lambda a, b: ty.binary("minimum", a, b))
    nonzero = staticmethod(lambda a: ty.binary("ne", a, 0))
    logical_or = staticmethod(lambda a, b: ty.binary("logical_or", a, b))
    logical_and = staticmethod(lambda a, b: ty.binary("logical_and", a, b))
    zero_like = staticmethod(lambda a: k.Const(0.0, a.dtype))


class _NumpyMath:
    """The same arithmetic on NumPy values (each rounded to its dtype, as the kernel's)."""

    add, sub, mul, div, neg = operator.add, operator.sub, operator.mul, operator.truediv, operator.neg
    sqrt = staticmethod(np.sqrt)
    positive = staticmethod(lambda a: a > 0)
    select = staticmethod(np.where)
    maximum, minimum = staticmethod(np.maximum), staticmethod(np.minimum)
    nonzero = staticmethod(lambda a: a != 0)
    logical_or, logical_and = staticmethod(np.logical_or), staticmethod(np.logical_and)
    zero_like = staticmethod(np.zeros_like)


def _sum(m, terms: Sequence, combine: str = "add") -> object:
    """Left to right, as written: ((t0 + t1) + t2) + ... (or another `combine` of `m`: maximum, ...)."""
    total = terms[0]
    for t in terms[1:]:
        total = getattr(m, combine)(total, t)
    return total


def dot_items(m, a: Sequence, b: Sequence):
    return _sum(m, [m.mul(x, y) for x, y in zip(a, b)])


def cross_items(m, a: Sequence, b: Sequence):
    if len(a) == 2:
        return m.sub(m.mul(a[0], b[1]), m.mul(a[1], b[0]))
    return [m.sub(m.mul(a[1], b[2]), m.mul(a[2], b[1])), m.sub(m.mul(a[2], b[0]), m.mul(a[0], b[2])),
            m.sub(m.mul(a[0], b[1]), m.mul(a[1], b[0]))]


def length_items(m, a: Sequence):
    return m.sqrt(dot_items(m, a, a))


def normalize_items(m, a: Sequence) -> list:
    """a / |a|, and the zero vector for a zero vector (as Warp's normalize)."""
    length = length_items(m, a)
    nonzero = m.positive(length)
    return [m.select(nonzero, m.div(x, length), 0.0) for x in a]


def matmul_items(m, a: Sequence, a_shape: tuple[int, int], b: Sequence, b_shape: tuple[int, int]) -> list:
    rows, inner, cols = a_shape[0], a_shape[1], b_shape[1]
    return [_sum(m, [m.mul(a[i * inner + t], b[t * cols + j]) for t in range(inner)])
            for i in range(rows) for j in range(cols)]


def transpose_items(a: Sequence, n: int) -> list:
    return [a[j * n + i] for i in range(n) for j in range(n)]


def _minor(a: Sequence, n: int, row: int, col: int) -> list:
    return [a[i * n + j] for i in range(n) if i != row for j in range(n) if j != col]


def determinant_items(m, a: Sequence, n: int):
    """Laplace expansion along the first row, terms added and subtracted left to right."""
    if n == 1:
        return a[0]
    if n == 2:
        return m.sub(m.mul(a[0], a[3]), m.mul(a[1], a[2]))
    total = None
    for j in range(n):
        term = m.mul(a[j], determinant_items(m, _minor(a, n, 0, j), n - 1))
        total = term if total is None else (m.add(total, term) if j % 2 == 0 else m.sub(total, term))
    return total


def diagonal_items(m, a: Sequence) -> list:
    """The square matrix with `a` on its diagonal (Warp's diag)."""
    n = len(a)
    return [a[i] if i == j else m.zero_like(a[i]) for i in range(n) for j in range(n)]


def skew_items(m, a: Sequence) -> list:
    """The matrix of `a x`: skew(a) @ b == cross(a, b) (Warp's skew)."""
    zero = m.zero_like(a[0])
    return [zero, m.neg(a[2]), a[1], a[2], zero, m.neg(a[0]), m.neg(a[1]), a[0], zero]


def inverse_items(m, a: Sequence, n: int) -> list:
    """The adjugate over the determinant (a singular matrix gives infinities or NaNs, as 1/0 does)."""
    det = determinant_items(m, a, n)
    out = []
    for i in range(n):
        for j in range(n):
            cofactor = determinant_items(m, _minor(a, n, j, i), n - 1)
            out.append(m.div(cofactor if (i + j) % 2 == 0 else m.neg(cofactor), det))
    return out


# --- the functions: bz.dot, bz.cross, ... ------------------------------------------------------------
class VectorFunction:
    """`bz.dot`, `bz.length`, ...: a rule over components, applied to kernel values or NumPy arrays."""

    def __init__(self, name: str, kinds: str, apply: Callable, doc: str, namespace: str = "bz",
                 optional: int = 0) -> None:
        # kinds: "v" a vector, "m" a square matrix, "s" a scalar; the last `optional` may be left out
        self.name, self.kinds, self.apply, self.optional = name, kinds, apply, optional
        self.__name__, self.__doc__ = name, doc
        self.qualified_name = f"{namespace}.{name}"

    def __repr__(self) -> str:
        return self.qualified_name

    def __call__(self, *args):
        """On NumPy arrays: vectors along the last axis, matrices along the last two."""
        try:
            return self._on_arrays(args)
        except ty.TypeProblem as problem:
            raise InputError(str(problem)) from None

    def _on_arrays(self, args):
        self._check_count(args)
        arrays = [np.asarray(a) for a in args]
        shapes = [{"v": a.shape[-1:], "m": a.shape[-2:], "s": ()}[kind] for a, kind in zip(arrays, self.kinds)]
        items = [[a[(..., *np.unravel_index(n, s))] for n in range(math.prod(s))] for a, s in zip(arrays, shapes)]
        with np.errstate(divide="ignore", invalid="ignore"):
            shape, result = self.apply(_NumpyMath, items, shapes)
        if shape == ():
            return result
        return np.stack(result, axis=-1).reshape(*np.broadcast_shapes(*[a.shape[:a.ndim - len(s)] for a, s in
                                                                      zip(arrays, shapes)]), *shape)

    def _check_count(self, args) -> None:
        most = len(self.kinds)
        if not most - self.optional <= len(args) <= most:
            wanted = most if not self.optional else f"{most - self.optional} to {most}"
            raise ty.TypeProblem(f"{self!r}: expected {wanted} argument(s), got {len(args)}")

    def in_kernel(self, args: list):
        """The function on kernel values: a scalar expression or a VectorValue."""
        self._check_count(args)
        for n, (a, kind) in enumerate(zip(args, self.kinds)):
            wanted = {"v": "a vector", "m": "a square matrix", "s": "a number"}[kind]
            if (kind == "s") == isinstance(a, VectorValue) or kind != "s" and a.type.is_matrix != (kind == "m"):
                raise ty.TypeProblem(f"{self!r}: argument {n + 1}: expected {wanted}, got {describe(a)}")
        vectors = [a for a in args if isinstance(a, VectorValue)]
        dtype = common_dtype([a.type.dtype for a in vectors])
        # A scalar argument (an epsilon) takes a float vector's type; with integer vectors it stays as it is.
        items = [[ty.as_expr(x, dtype) for x in a.items] if isinstance(a, VectorValue) else
                 [ty.as_expr(a, dtype if dtype.is_floating else None)] for a in args]
        shape, result = self.apply(_KernelMath, items, [a.type.shape if isinstance(a, VectorValue) else ()
                                                        for a in args])
        return result if shape == () else _vector_of(shape, result)


def _same_length(name: str, shapes, lengths: tuple[int, ...] = ()) -> int:
    n = shapes[0][0]
    if any(s != shapes[0] for s in shapes) or lengths and n not in lengths:
        wanted = " or ".join(f"vec{m}" for m in lengths) if lengths else "vectors of one length"
        raise ty.TypeProblem(f"bz.{name}: expected {wanted}, got lengths {[s[0] for s in shapes]}")
    return n


def _square(name: str, shape) -> int:
    if shape[0] != shape[1]:
        raise ty.TypeProblem(f"bz.{name}: expected a square matrix, got shape {shape}")
    return shape[0]


def _apply_dot(m, items, shapes):
    _same_length("dot", shapes)
    return (), dot_items(m, *items)


def _apply_cross(m, items, shapes):
    n = _same_length("cross", shapes, (2, 3))
    return ((), cross_items(m, *items)) if n == 2 else ((3,), cross_items(m, *items))


def _apply_outer(m, items, shapes):
    a, b = items
    return (len(a), len(b)), [m.mul(x, y) for x in a for y in b]


def _apply_determinant(m, items, shapes):
    return (), determinant_items(m, items[0], _square("determinant", shapes[0]))


def _apply_inverse(m, items, shapes):
    n = _square("inverse", shapes[0])
    return (n, n), inverse_items(m, items[0], n)


def _apply_transpose(m, items, shapes):
    n = _square("transpose", shapes[0])
    return (n, n), transpose_items(items[0], n)


def _trace(m, a: Sequence, n: int):
    return _sum(m, [a[i * n + i] for i in range(n)])


def _apply_skew(m, items, shapes):
    _same_length("skew", shapes, (3,))
    return (3, 3), skew_items(m, items[0])


def _reduction(name: str, combine: str, doc: str, each: str | None = None) -> VectorFunction:
    """A function of one vector that combines its components (each first passed through `each`)."""
    def apply(m, items, shapes):
        parts = items[0] if each is None else [getattr(m, each)(x) for x in items[0]]
        return (), _sum(m, parts, combine)
    return VectorFunction(name, "v", apply, doc, "bz.math")


dot = VectorFunction("dot", "vv", _apply_dot, "a . b: the sum of the products of the components, left to right.")
cross = VectorFunction("cross", "vv", _apply_cross, "a x b of two vec3 (a vec3), or of two vec2 (a scalar).")
length = VectorFunction("length", "v", lambda m, items, shapes: ((), length_items(m, items[0])),
                        "The Euclidean length sqrt(dot(a, a)).")


def _apply_norm(m, items, shapes):
    squared = dot_items(m, items[0], items[0])
    return (), m.sqrt(squared if len(items) == 1 else m.add(squared, items[1][0]))


def _apply_normalized(m, items, shapes):
    if len(items) == 1:
        return shapes[0], normalize_items(m, items[0])
    scale = m.add(length_items(m, items[0]), items[1][0])
    return shapes[0], [m.div(x, scale) for x in items[0]]


# Taichi's v.norm(eps) and v.normalized(eps) (Genesis writes n.norm(EPS), difftaichi v.normalized(1e-6)): the
# epsilon keeps a zero vector's length and direction finite, as Taichi adds it.
norm = VectorFunction("norm", "vs", _apply_norm, "The Euclidean length sqrt(dot(a, a)), or sqrt(dot(a, a) + eps) "
                      "given eps (Taichi's name and epsilon).", optional=1)
length_sq = VectorFunction("length_sq", "v", lambda m, items, shapes: ((), dot_items(m, items[0], items[0])),
                           "dot(a, a).")
normalize = VectorFunction("normalize", "v", lambda m, items, shapes: (shapes[0], normalize_items(m, items[0])),
                           "a / length(a), or the zero vector for a zero vector.")
outer = VectorFunction("outer", "vv", _apply_outer, "The matrix a b^T (its shape must be a braze matrix type).")
transpose = VectorFunction("transpose", "m", _apply_transpose, "The transposed matrix.")
determinant = VectorFunction("determinant", "m", _apply_determinant, "The determinant (Laplace expansion).")
inverse = VectorFunction("inverse", "m", _apply_inverse, "The inverse: the adjugate over the determinant.")

trace = VectorFunction("trace", "m", lambda m, items, shapes: ((), _trace(m, items[0], _square("trace", shapes[0]))),
                       "The sum of the diagonal, top left to bottom right.")
diag = VectorFunction("diag", "v", lambda m, items, shapes: ((len(items[0]),) * 2, diagonal_items(m, items[0])),
                      "The square matrix with the vector on its diagonal and zeros elsewhere.")
skew = VectorFunction("skew", "v", _apply_skew,
                      "The matrix of the cross product by a vec3: skew(a) @ b == cross(a, b).")
# Reductions over a vector's components, left to right: Taichi's v.sum(), v.max(), v.any(), ...; Warp's
# wp.max(v); Python's sum(v), max(v), any(v). `bz.math.max` and `min` of two values stay elementwise.
component_sum = _reduction("sum", "add", "The sum of the components, left to right.")
component_max = _reduction("max", "maximum", "The largest component (NaN if any is NaN).")
component_min = _reduction("min", "minimum", "The smallest component (NaN if any is NaN).")
any_nonzero = _reduction("any", "logical_or", "Whether any component is nonzero (a bool).", "nonzero")
all_nonzero = _reduction("all", "logical_and", "Whether every component is nonzero (a bool).", "nonzero")

normalized = VectorFunction("normalized", "vs", _apply_normalized,
                            "normalize(a), or a / (length(a) + eps) given eps (Taichi's name and epsilon).",
                            "bz.math", optional=1)

FUNCTIONS = (dot, cross, length, norm, length_sq, normalize, outer, transpose, determinant, inverse, trace, diag, skew)
REDUCTIONS = (component_sum, component_max, component_min, any_nonzero, all_nonzero)
# The one table of names: `v.<name>(...)` in a kernel is `bz.math.<name>(v, ...)`, under braze's and Warp's
# names and Taichi's (norm_sqr, normalized, outer_product).
METHODS: dict[str, VectorFunction] = {**{f.name: f for f in FUNCTIONS + REDUCTIONS}, "norm_sqr": length_sq,
                                      "normalized": normalized, "outer_product": outer}
TYPES = tuple(_TYPES.values())


# --- operators on kernel values ------------------------------------------------------------------
def describe(value) -> str:
    """How an error names a value's type."""
    if isinstance(value, VectorValue):
        return repr(value.type)
    if isinstance(value, k.Expr):
        return value.dtype.name
    return type(value).__name__


def common_dtype(dtypes: list[DType]) -> DType:
    """The type vectors of `dtypes` compute in together: the widest float among them (an integer vector
    with a float one takes the float's type, as an integer scalar does), else their promoted integer
    (or bool) type."""
    floats = [d for d in dtypes if d.is_floating]
    if floats:
        return dt.float64 if dt.float64 in floats else floats[0]
    return dt.result_type(*[(d, 0) for d in dtypes])


def _vector_of(shape: tuple[int, ...], items: Sequence) -> VectorValue:
    """The vector of `items`, of the type they compute in (an integer vector's `I / 2` holds floats)."""
    dtype = common_dtype([ty.type_of(x)[0] for x in items])
    return VectorValue(type_of_shape(shape, dtype), tuple(ty.as_expr(x, dtype) for x in items))


def _scalar_dtype(vector_dtype: DType, scalar) -> DType:
    """The result dtype of a vector and a scalar: integer scalars take the vector's float dtype."""
    if not isinstance(scalar, k.Expr):
        if not isinstance(scalar, (int, float)):
            raise ty.TypeProblem(f"expected a number or a vector, got {describe(scalar)}")
        return vector_dtype
    return common_dtype([vector_dtype, scalar.dtype]) if scalar.dtype.is_floating else vector_dtype


_ELEMENTWISE = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "pow": "**", "floordiv": "//", "remainder": "%"}
# Of integer and bool vectors, component by component (bool vectors: what comparisons give).
_BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "logical_and": "and", "logical_or": "or"}
_COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_SYMBOLS = {**_ELEMENTWISE, **_BITWISE, **_COMPARISONS}
# Component by component on vectors, but a linear-algebra product on matrices: refused there.
_MATRIX_PRODUCT = "a product of matrices is written a @ b"
_NOT_FOR_MATRICES = {"mul": _MATRIX_PRODUCT, "truediv": _MATRIX_PRODUCT, "pow": "a power of a matrix is written a @ a"}


def binary(op: str, a, b):
    """`a <op> b` where at least one side is a VectorValue (the other may be a constant vector, a NumPy
    array of a vector's shape: `pos - UPPER` of a global `UPPER = bz.vec3d(...)`)."""
    a, b = (constant_vector(v) or v for v in (a, b))
    if op == "matmul":
        return matmul(a, b)
    symbol = _SYMBOLS.get(op)
    if symbol is None:
        raise ty.TypeProblem(f"operator {op} is not defined for {describe(a)} and {describe(b)} (vectors take "
                             "+ - * / // % ** @, comparisons, & | ^ of integer and bool vectors, and the functions "
                             "bz.dot, bz.cross, bz.length, ...)")
    matrices = [v for v in (a, b) if isinstance(v, VectorValue) and v.type.is_matrix]
    if op in _NOT_FOR_MATRICES and (len(matrices) == 2 or matrices and op == "pow"):
        raise ty.TypeProblem(f"{describe(a)} {symbol} {describe(b)}: {_NOT_FOR_MATRICES[op]} (component by "
                             "component: write the components)")
    vectors = [v for v in (a, b) if isinstance(v, VectorValue)]
    if len(vectors) == 2 and a.type.shape != b.type.shape:
        raise ty.TypeProblem(f"{describe(a)} {symbol} {describe(b)}: the shapes differ")
    if op in _ELEMENTWISE and all(v.type.dtype.is_floating for v in vectors):
        return _float_binary(op, a, b, symbol)
    return _componentwise(op, a, b, symbol)


def _float_binary(op: str, a, b, symbol: str) -> VectorValue:
    """Arithmetic of float vectors: an integer scalar takes the vector's type, a wider float widens it."""
    if isinstance(a, VectorValue) and isinstance(b, VectorValue):
        dtype = common_dtype([a.type.dtype, b.type.dtype])
        pairs = zip(a.items, b.items)
    else:
        vector, scalar = (a, b) if isinstance(a, VectorValue) else (b, a)
        if isinstance(scalar, k.Expr) and not scalar.dtype.is_floating and not scalar.dtype.is_integer:
            raise ty.TypeProblem(f"{describe(a)} {symbol} {describe(b)}: expected a number with a vector")
        dtype = _scalar_dtype(vector.type.dtype, scalar)
        scalar = ty.as_expr(scalar, dtype) if isinstance(scalar, k.Expr) else scalar
        pairs = ((x, scalar) for x in vector.items) if vector is a else ((scalar, x) for x in vector.items)
    vtype = type_of_shape((a if isinstance(a, VectorValue) else b).type.shape, dtype)
    items = tuple(ty.as_expr(ty.binary(op, _widen(x, dtype), _widen(y, dtype)), dtype) for x, y in pairs)
    return VectorValue(vtype, items)


def _componentwise(op: str, a, b, symbol: str) -> VectorValue:
    """`a <op> b` of integer or bool vectors, a comparison, or a float vector with an integer one: each
    pair of components as scalars would compute it (a float vector's type where one is float)."""
    vectors = [v for v in (a, b) if isinstance(v, VectorValue)]
    for v in (a, b):
        if not isinstance(v, VectorValue) and not ty.is_value(v):
            raise ty.TypeProblem(f"{describe(a)} {symbol} {describe(b)}: expected a number or a vector, got "
                                 f"{describe(v)}")
    floats = [v.type.dtype for v in vectors if v.type.dtype.is_floating]
    width = vectors[0].type.size
    a_items, b_items = (_items_as(v, width, common_dtype(floats) if floats else None) for v in (a, b))
    return _vector_of(vectors[0].type.shape, [ty.binary(op, x, y) for x, y in zip(a_items, b_items)])


def _items_as(value, width: int, float_dtype: DType | None) -> list:
    """A side's components (a scalar repeated), an integer vector's taken to `float_dtype` where given."""
    if not isinstance(value, VectorValue):
        return [value] * width
    if float_dtype is None or value.type.dtype.is_floating:
        return list(value.items)
    return [ty.as_expr(x, float_dtype) for x in value.items]


def _widen(x, dtype: DType):
    return ty.as_expr(x, dtype) if isinstance(x, k.Expr) else x


def matmul(a, b):
    if not (isinstance(a, VectorValue) and isinstance(b, VectorValue)):
        raise ty.TypeProblem(f"{describe(a)} @ {describe(b)}: expected vectors or matrices on both sides")
    if not a.type.is_matrix and not b.type.is_matrix:
        return dot.in_kernel([a, b])
    a_shape = a.type.shape if a.type.is_matrix else (1, a.type.shape[0])
    b_shape = b.type.shape if b.type.is_matrix else (b.type.shape[0], 1)
    if a_shape[1] != b_shape[0]:
        raise ty.TypeProblem(f"{describe(a)} @ {describe(b)}: the inner dimensions differ")
    dtype = common_dtype([a.type.dtype, b.type.dtype])
    items = matmul_items(_KernelMath, [ty.as_expr(x, dtype) for x in a.items], a_shape,
                         [ty.as_expr(x, dtype) for x in b.items], b_shape)
    shape = (a_shape[0], b_shape[1]) if a.type.is_matrix and b.type.is_matrix else (len(items),)
    return VectorValue(type_of_shape(shape, dtype), tuple(items))


_UNARY = ("neg", "bitwise_not", "logical_not")  # -v, ~b and `not` of integer and bool vectors too


def unary(op: str, x: VectorValue) -> VectorValue:
    if op not in _UNARY:
        raise ty.TypeProblem(f"operator {op} is not defined for {describe(x)}")
    return _vector_of(x.type.shape, [ty.unary(op, c) for c in x.items])


def elementwise(name: str, fn: Callable, args: list) -> VectorValue:
    """A scalar function applied component by component (`bz.math.sin(v)`, `abs(v)`, `min(a, b)`), to
    float and integer vectors alike; a constant vector among the arguments (a global `bz.vec3d(...)`)
    is taken as a vector."""
    args = [constant_vector(a) or a for a in args]
    vectors = [a for a in args if isinstance(a, VectorValue)]
    shape = vectors[0].type.shape
    if any(v.type.shape != shape for v in vectors):
        raise ty.TypeProblem(f"{name}: the vector arguments differ in shape")
    columns = [a.items if isinstance(a, VectorValue) else [a] * len(vectors[0].items) for a in args]
    return _vector_of(shape, [fn(*parts) for parts in zip(*columns)])


def cast(value: VectorValue, dtype: DType) -> VectorValue:
    """`v.cast(int)`, `bz.cast(v, bz.float32)`: each component converted (floats to integers truncate)."""
    return VectorValue(type_of_shape(value.type.shape, dtype), tuple(ty.convert(x, dtype) for x in value.items))


def constant_vector(value) -> VectorValue | None:
    """A NumPy array of a vector's or matrix's shape and dtype (a global `UPPER = bz.vec3d(1, 2, 3)`, an
    offset of `bz.static(bz.grouped(...))`) as a vector of constants; None for anything else."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        return None
    vtype = _TYPES.get((value.shape, dt.from_numpy(value.dtype).name))
    if vtype is None:
        return None
    return VectorValue(vtype, tuple(ty.literal(x.item(), vtype.dtype) for x in value.reshape(-1)))


def construct(vtype: VectorType, args: list) -> VectorValue:
    """`bz.vec3(...)` in a kernel."""
    def convert(v):
        if isinstance(v, VectorValue) or not ty.is_value(v):
            raise ty.TypeProblem(f"{vtype!r}: expected numbers or vectors, got {describe(v)}")
        return ty.assignable(v, vtype.dtype, f"a component of {vtype!r}")
    return VectorValue(vtype, tuple(construct_items(vtype, args, convert)))


def filled(vtype: VectorType, args: list) -> VectorValue:
    """The value Taichi's `v.fill(x)` gives v: every component x, for matrices too."""
    if len(args) != 1 or not ty.is_value(args[0]) or isinstance(args[0], VectorValue):
        raise ty.TypeProblem(f"fill: expected one number, got {', '.join(describe(a) for a in args) or 'none'}")
    return VectorValue(vtype, (ty.assignable(args[0], vtype.dtype, f"a component of {vtype!r}"),) * vtype.size)


def zero(vtype: VectorType) -> VectorValue:
    return VectorValue(vtype, (ty.as_expr(0, vtype.dtype),) * vtype.size)


def identity(vtype: VectorType) -> VectorValue:
    n = vtype.shape[0]
    return VectorValue(vtype, tuple(k.Const(1.0 if i == j else 0.0, vtype.dtype) for i in range(n) for j in range(n)))
