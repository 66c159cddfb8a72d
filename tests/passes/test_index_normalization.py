"""Equivalent index forms name the same elements: task fusion compares them after normalization."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze import dtypes as dt
from braze.kir import nodes as k
from braze.passes.fuse_tasks import normalized

T = k.Var("t", dt.int64)
N = k.ScalarRef(k.ScalarParam("n", dt.int64))


def const(v: int) -> k.Const:
    return k.Const(v, dt.int64)


def op(name: str, a: k.Expr, b: k.Expr) -> k.Binary:
    return k.Binary(name, a, b, dt.int64)


@settings(max_examples=200, deadline=None)
@given(st.integers(-4, 4).filter(bool), st.integers(-9, 9), st.booleans(), st.booleans(), st.booleans())
def test_affine_forms_written_in_any_order_normalize_alike(scale, offset, scale_first, offset_first, with_n):
    scaled = op("mul", const(scale), T) if scale_first else op("mul", T, const(scale))
    written = op("add", const(offset), scaled) if offset_first else op("add", scaled, const(offset))
    if with_n:
        written = op("add", N, written)
    canonical = op("add", op("mul", T, const(scale)), const(offset))
    if with_n:
        canonical = op("add", canonical, N)
    assert normalized(written) == normalized(canonical)


def test_identities_drop_away():
    assert normalized(op("add", T, const(0))) == T
    assert normalized(op("mul", const(1), T)) == T
    assert normalized(op("add", op("add", T, const(1)), const(2))) == normalized(op("add", T, const(3)))


def test_different_elements_stay_different():
    assert normalized(op("add", T, const(1))) != normalized(T)
    assert normalized(op("sub", T, N)) != normalized(op("sub", N, T))


PAIRS = [("t", "t + 0"), ("t", "t * 1"), ("3 + t", "t + 3"), ("2 * t", "t * 2"), ("t + n", "n + t")]


@pytest.mark.parametrize("first, second", PAIRS)
def test_tasks_writing_equivalent_indices_fuse_and_compute_the_same(first, second, tmp_path):
    path = tmp_path / "pair_kernel.py"
    path.write_text(f"""
import braze as bz

@bz.kernel
def pair(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1], n: bz.int64):
    for t in range(b.shape[0]):
        a[{first}] = b[t] * 2.0
    for t in range(b.shape[0]):
        a[{second}] = a[{second}] + 1.0
""")
    spec = importlib.util.spec_from_file_location(f"pair_{abs(hash(first + second))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    b = np.arange(10, dtype=np.float32)
    a = np.zeros(40, np.float32)
    module.pair(a, b, 5)
    want = np.zeros(40, np.float32)
    for t in range(10):
        index = eval(first, {"t": t, "n": 5})  # noqa: S307  (the test's own expressions)
        want[index] = b[t] * 2 + 1
    np.testing.assert_array_equal(a, want)
    assert [d.fused for d in module.pair.decisions()] == [True]
