"""argmax and argmin for the CPU: two folds (the extreme value, then the least index holding it),
each of which the LLVM backend vectorizes, with NumPy's first occurrence for ties and NaNs."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import engine
from braze.kir import nodes as k


def _fusion(op, dtype=bz.float32, axis=-1) -> bz.Fusion:
    with bz.Fusion() as f:
        f.add_output(op(f.define_tensor([-1, -1], dtype=dtype), axis))
    return f


def _specials(rng: np.random.Generator, shape) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.integers(0, flat.size, (max(1, flat.size // 20), 4))
    flat[picks[:, 0]] = flat.max()
    flat[picks[:, 1]] = flat.min()
    flat[picks[: max(1, len(picks) // 3), 2]] = np.inf
    flat[picks[: max(1, len(picks) // 5), 3]] = np.nan
    x[0] = -np.inf  # a row of nothing but -inf: its first element
    return x


def test_the_cpu_kernel_has_no_update_under_an_if():
    f = _fusion(bz.ops.argmax)
    x = np.ones((3, 5), np.float32)
    _, kernel, _ = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, [x])))
    body = [s for t in kernel.tasks for s in t.body]

    def walk(stmts):
        for s in stmts:
            yield s
            for name in ("body", "then", "orelse"):
                yield from walk(getattr(s, name, ()))

    assert not any(isinstance(s, k.If) for s in walk(body))


@pytest.mark.parametrize("shape", [(4, 1), (3, 7), (5, 33), (2, 1000), (1, 4099)], ids=str)
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_ties_infinities_and_nans_take_the_first_occurrence(shape, name):
    x = _specials(np.random.default_rng(sum(shape)), shape)
    for axis in (0, 1):
        (got,) = _fusion(getattr(bz.ops, name), axis=axis).execute([x])
        np.testing.assert_array_equal(got, getattr(np, name)(x, axis=axis))


@pytest.mark.parametrize("dtype", [bz.int32, bz.bool_, bz.float64])
def test_other_dtypes(dtype):
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 3, (6, 50)).astype(dtype.numpy)
    for name in ("argmax", "argmin"):
        (got,) = _fusion(getattr(bz.ops, name), dtype).execute([x])
        np.testing.assert_array_equal(got, getattr(np, name)(x, axis=-1))
