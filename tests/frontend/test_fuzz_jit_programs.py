"""Random programs written with NumPy's functions and with torch's (tests/jit_programs.py) give, under
`@bz.jit`, what NumPy or torch eager gives for them: the same shapes and dtypes, values within float32's
tolerance of the float64 run, and a braze error where the library itself refuses (a max over nothing).
Inputs have extents 0, 1 and odd ones and come contiguous, transposed or strided. A few programs a run in CI;
BRAZE_FUZZ_SCALE (tests/fuzz_scale.py) draws more."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from fuzz_scale import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jit_programs import Program, input_arrays, numpy_program, programs, tolerance, torch_program

import braze as bz

FEW = settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _quietly(fn, *args):
    """The library's result, or the exception it raised."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args)
        except (ValueError, IndexError, RuntimeError) as error:
            return error


def _as_tuple(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def check_numpy(program: Program, seed: int) -> None:
    inputs = input_arrays(program, seed)
    expected = _quietly(numpy_program(program, np.float64), *[a.astype(np.float64) for a in inputs])
    if isinstance(expected, Exception):
        with pytest.raises(bz.Error):
            bz.jit(numpy_program(program))(*inputs)
        return
    dtypes = [np.asarray(r).dtype for r in _as_tuple(_quietly(numpy_program(program), *inputs))]
    with np.errstate(all="ignore"):
        actual = _as_tuple(bz.jit(numpy_program(program))(*inputs))
    _compare(program, [np.asarray(a) for a in actual], [np.asarray(e) for e in _as_tuple(expected)], dtypes)


def check_torch(program: Program, seed: int) -> None:
    torch = pytest.importorskip("torch")
    arrays = input_arrays(program, seed)
    inputs = [torch.from_numpy(a) for a in arrays]
    expected = _quietly(torch_program(program, torch.float64), *[t.double() for t in inputs])
    if isinstance(expected, Exception):
        with pytest.raises(bz.Error):
            bz.jit(torch_program(program))(*inputs)
        return
    # braze promotes as the array API standard says, as NumPy does; torch lets a dimensioned tensor's
    # dtype win over a 0-d one's (a float64 0-d tensor times float32 ones is float32 in torch)
    dtypes = [np.asarray(r).dtype for r in _as_tuple(_quietly(numpy_program(program), *arrays))]
    actual = _as_tuple(bz.jit(torch_program(program))(*inputs))
    assert all(isinstance(a, torch.Tensor) for a in actual), [type(a) for a in actual]
    _compare(program, [a.numpy() for a in actual], [e.numpy() for e in _as_tuple(expected)], dtypes)


def _compare(program: Program, actual: list, expected: list, dtypes: list) -> None:
    assert len(actual) == len(expected) == len(program.outputs)
    for output, got, want, dtype in zip(program.outputs, actual, expected, dtypes, strict=True):
        assert got.shape == want.shape, f"v{output}: shape {got.shape}, expected {want.shape}"
        assert got.dtype == dtype, f"v{output}: dtype {got.dtype}, expected {dtype}"
        atol = tolerance(program, output)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=0, atol=atol,
                                   err_msg=f"v{output}")


@FEW
@given(programs(library="numpy"), st.integers(0, 2**31 - 1))
def test_random_numpy_programs_give_numpys_result(program: Program, seed: int) -> None:
    check_numpy(program, seed)


@FEW
@given(programs(library="torch"), st.integers(0, 2**31 - 1))
def test_random_torch_programs_give_torchs_result(program: Program, seed: int) -> None:
    check_torch(program, seed)
