"""Programs that reuse values heavily, written once over an op namespace: braze's (`bz.ops`, inside a
`bz.Fusion`) or NumPy's (`NUMPY`, in float64), so the reference is the same program.

A value used twice is one node of the Kernel IR (braze/kir/nodes.py): these programs have DAGs whose
trees grow exponentially with their depth, which compile in time linear in their ops only if no stage
walks them as trees (tests/engine/test_compile_scaling.py, benchmarks/compile_time.py).
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np

NUMPY = SimpleNamespace(
    sin=np.sin, tanh=np.tanh, abs=np.abs, maximum=np.maximum, minimum=np.minimum,
    where=np.where, sum=lambda x, axes: np.sum(x, axis=tuple(axes)),
    mean=lambda x, axes: np.mean(x, axis=tuple(axes)), cat=np.concatenate)


def chain(ops, x, n: int):
    """`t = x; t = t * sin(t) + t`, `n` times: 3n ops, each value used three times. (Chaotic for some
    positive inputs: compare on inputs in [-1, 0], where every step moves t towards 0.)"""
    t = x
    for _ in range(n):
        t = t * ops.sin(t) + t
    return t


def rolls(ops, x, n: int):
    """`x` plus `n` rotations of its rows (by 1, 2, ... columns, each a cat of two slices): one loop
    over the columns branching at n places (braze/passes/split_loops.py splits it or leaves it)."""
    t = x
    for k in range(n):
        shift = 1 + k % 32
        t = t + ops.cat([x[:, shift:], x[:, :shift]], 1)
    return t


def stencil_steps(ops, x, n: int):
    """`n` steps of a 1-D heat equation on periodic rows, each reading the step before at three shifts
    (two rotations, each a cat of two slices): fused whole, step k is computed 3**(n - k) times."""
    t = x
    for _ in range(n):
        left, right = ops.cat([t[:, 1:], t[:, :1]], 1), ops.cat([t[:, -1:], t[:, :-1]], 1)
        t = t + 0.1 * (left + right - 2 * t)
    return t


# Each step: (ops it adds, its value from two recent values). All are 1-Lipschitz, so rounding
# differences between backends stay as small as the ops are many.
_STEPS = (
    (1, lambda ops, a, b: ops.sin(a)),
    (1, lambda ops, a, b: ops.tanh(a)),
    (1, lambda ops, a, b: ops.maximum(a, b)),
    (1, lambda ops, a, b: ops.minimum(a, b)),
    (2, lambda ops, a, b: (a + b) * 0.5),
    (2, lambda ops, a, b: (a - b) * 0.5),
    (4, lambda ops, a, b: ops.where(a > 0.0, ops.sin(a), a * 0.5)),  # continuous at 0: no jump to round into
)


def wide(ops, x, row, n_ops: int, seed: int = 0, window: int = 6) -> list:
    """About `n_ops` ops over `x` (2-D) and `row` (1-D, broadcast over x's rows), each step reading two
    of the last `window` values (so most values have several users), with a row sum and a row mean of
    values from the middle, and the last value, as outputs."""
    rng = random.Random(seed)
    values = [x, x * row, ops.sin(x) + row]
    made = 4
    outputs = []
    while made < n_ops:
        cost, step = rng.choice(_STEPS)
        a, b = rng.sample(values[-window:], 2)
        values.append(step(ops, a, b))
        made += cost
        if len(outputs) < 2 and made >= n_ops * (len(outputs) + 1) // 3:
            outputs.append((ops.sum, ops.mean)[len(outputs)](values[-1], axes=[1]))
            made += 1
    return [*outputs, values[-1]]
