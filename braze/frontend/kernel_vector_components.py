"""The components of vectors and matrices in `@bz.kernel`s: `v.x`, `v[i]` and `m[i, j]` at constant
indices, and `v[j]` of a local vector at an index known only at run time (a chain of selects).
"""

from __future__ import annotations

import math

from braze.frontend import kernel_types as ty
from braze.frontend.kernel_scope import VectorValue
from braze.frontend.kernel_vectors import VectorType, type_of_shape
from braze.kir import nodes as k

_COMPONENT_NAMES = ("x", "y", "z", "w")  # a tuple: `"xy" in "xyzw"` would hold


def component_position(vtype: VectorType, name: str) -> int:
    """The position of `.x`, `.y`, `.z` or `.w`."""
    names = _COMPONENT_NAMES[:vtype.shape[0]]
    if vtype.is_matrix or name not in names:
        have = f"components {', '.join(names)}" if not vtype.is_matrix else "no named components (index it: m[i, j])"
        raise ty.TypeProblem(f"{vtype!r} has no component '{name}'; it has {have}")
    return names.index(name)


def constant_positions(vtype: VectorType, key) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(positions, shape) of `v[key]` for a constant key: a vector's component, a matrix's row
    (`m[i]`) or element (`m[i, j]`). Negative indices count from the end, as in Python."""
    keys = key if isinstance(key, tuple) else (key,)
    if len(keys) > len(vtype.shape) or not all(isinstance(i, int) and not isinstance(i, bool) for i in keys):
        raise ty.TypeProblem(f"{vtype!r}: expected {len(vtype.shape)} integer index(es) or fewer, got {key!r}")
    for i, n in zip(keys, vtype.shape):
        if not -n <= i < n:
            raise ty.TypeProblem(f"{vtype!r}: index {i} is out of range for an extent of {n}")
    wrapped = [i % n for i, n in zip(keys, vtype.shape)]
    rest = vtype.shape[len(keys):]
    base = sum(i * math.prod(vtype.shape[a + 1:]) for a, i in enumerate(wrapped))
    return tuple(base + j for j in range(math.prod(rest))), rest


def select_component(value: VectorValue, index: k.Expr):
    """`v[j]` of a local vector with j known only at run time: a chain of selects (j out of range
    gives the last component; `debug=True` checks it)."""
    rows = value.type.shape[0]
    parts = [_row(value, r) for r in range(rows)]
    result = parts[-1]
    for r in reversed(range(rows - 1)):
        test = ty.binary("eq", index, r)
        result = _select(test, parts[r], result)
    return result


def _row(value: VectorValue, r: int):
    if not value.type.is_matrix:
        return value.items[r]
    n = value.type.shape[1]
    return VectorValue(type_of_shape((n,), value.type.dtype), value.items[r * n:(r + 1) * n])


def _select(test, a, b):
    if isinstance(a, VectorValue):
        return VectorValue(a.type, tuple(ty.ternary("where", test, x, y) for x, y in zip(a.items, b.items)))
    return ty.ternary("where", test, a, b)
