"""Mistakes in how braze is called raise braze errors that say what was expected: Python control
flow on traced values, masked arrays."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz


@pytest.mark.parametrize("body", [
    lambda x: x if x.sum() > 0 else -x,
    lambda x: x if bool(x) else -x,
    lambda x: (x > 0) and x,
    lambda x: x * 2.0 if not x else x,
])
def test_data_dependent_control_flow_in_jit_says_traced_values_have_no_truth_value(body) -> None:
    traced = bz.jit(body)
    with pytest.raises(bz.TracerBoolConversionError, match=r"traced tensor: it has no truth value") as caught:
        traced(np.ones(3, np.float32))
    assert isinstance(caught.value, bz.FusionDefinitionError) and isinstance(caught.value, TypeError)
    assert "bz.ops.where" in str(caught.value)


def test_jit_still_branches_on_python_values() -> None:
    @bz.jit
    def maybe_negated(x, negate):
        return -x if negate else x * 1.0

    a = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(maybe_negated(a, True), -a)
    np.testing.assert_array_equal(maybe_negated(a, False), a)


def _masked() -> np.ma.MaskedArray:
    return np.ma.masked_array(np.arange(4, dtype=np.float32), mask=[0, 1, 0, 0])


MASKED = "expected an array without a mask, got a NumPy masked array"


def test_a_fusion_refuses_masked_arrays() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        f.add_output(x + 1.0)
    f.execute([np.arange(4, dtype=np.float32)])  # a cached call exists: the masked array must not take it
    with pytest.raises(bz.InputError, match=rf"^input 0 \('x'\): {MASKED}"):
        f.execute([_masked()])


def test_jit_refuses_masked_arrays() -> None:
    double = bz.jit(lambda x: x * 2.0)
    double(np.arange(4, dtype=np.float32))
    with pytest.raises(bz.InputError, match=rf"^argument 'x': {MASKED}"):
        double(_masked())


@bz.kernel
def _copy(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1]):
    for i in range(x.shape[0]):
        y[i] = x[i]


def test_a_loop_kernel_refuses_masked_arrays() -> None:
    y = np.zeros(4, np.float32)
    _copy(np.arange(4, dtype=np.float32), y)
    with pytest.raises(bz.InputError, match=rf"test_user_errors.py:\d+: kernel _copy: argument 'x': {MASKED}"):
        _copy(_masked(), y)
