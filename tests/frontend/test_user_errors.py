"""Mistakes in how braze is called raise braze errors that say what was expected: Python control
flow on traced values, masked arrays."""

from __future__ import annotations

import pickle

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


@pytest.mark.parametrize("body, match", [
    (lambda x: x * float(x.amax()), r"float\(T\d+\): expected a Python value, got a traced tensor"),
    (lambda x: x / x.abs().max().item(), r"T\d+\.item\(\): expected a Python value"),
    (lambda x: x + int(x.sum()), r"int\(T\d+\): expected a Python value"),
], ids=["float", "item", "int"])
def test_python_values_of_traced_tensors_and_extents_say_why_there_are_none(body, match) -> None:
    with pytest.raises(bz.TracerBoolConversionError, match=match):
        bz.jit(body)(np.ones((2, 3), np.float32))


def test_assigning_into_an_argument_says_to_copy_it_first() -> None:
    def clear_first_column(x):
        x[:, 0] = 0.0
        return x

    with pytest.raises(bz.UnsupportedError, match=r"\[\.\.\.\] = \.\.\.: T0 \('x'\) is an input, the caller's array, "
                                                  r".*x = x.copy\(\)"):
        bz.jit(clear_first_column)(np.ones((2, 3), np.float32))


def test_model_code_on_dtypes_and_rounding_means_what_it_means_in_torch() -> None:
    """`x.dtype == torch.float16` (or a NumPy dtype, or a name) compares the type, and round(x) rounds."""
    torch = pytest.importorskip("torch")

    @bz.jit
    def upcast_halves(x):
        h = x.float() if x.dtype == torch.float16 or x.dtype in (np.float16, "bfloat16") else x * 2
        return round(h * 2.5)

    assert upcast_halves(np.ones(2, np.float16)).dtype == np.float32
    np.testing.assert_array_equal(upcast_halves(np.ones(2, np.float16)), [2.0, 2.0])
    np.testing.assert_array_equal(upcast_halves(np.ones(2, np.float32)), [5.0, 5.0])
    assert bz.float32 == torch.float32 and bz.float32 != torch.float16 and bz.bfloat16 == "bfloat16"
    assert bz.int64 != 3 and {bz.float32: 1}[pickle.loads(pickle.dumps(bz.float32))] == 1


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
