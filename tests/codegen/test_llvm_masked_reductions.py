"""Masked row max and min on the CPU (`max(where(mask, x, -inf))`, the masked softmax's row max): the
row loop is vectorized (InstCombine would otherwise fold the mask into a conditional update that
LLVM's loop vectorizer leaves scalar, 25x slower), and the results stay NumPy's: NaNs propagate,
rows masked whole give the identity, for float32, float64 and int32. Float max and min folds ignore
the sign of zero (as NumPy's may), which spares a blend per vector on x86."""

from __future__ import annotations

import re

import numpy as np
import pytest

import braze as bz
from braze import config

CASES = [(op, dtype) for op in ("max", "min") for dtype in ("float32", "float64", "int32")]


def _fill(op: str, dtype: str):
    if dtype == "int32":
        info = np.iinfo(np.int32)
        return int(info.min if op == "max" else info.max)
    return float("-inf") if op == "max" else float("inf")


def _masked_rows(op: str, dtype: str) -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), dtype=getattr(bz, dtype))
        mask = f.define_tensor((-1, -1), dtype=bz.bool_)
        f.add_output(getattr(bz.ops, op)(bz.ops.where(mask, x, _fill(op, dtype)), axes=[1]))
    return f


def _inputs(dtype: str, rows: int, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, width)) * 100).astype(dtype)
    mask = rng.random((rows, width)) < 0.6
    mask[0] = False  # a row masked whole
    if dtype != "int32" and rows > 2 and width:
        x[1, rng.integers(width)] = np.nan  # NaN propagates, wherever it sits in the row
        mask[1] = True
    return x, mask


@pytest.mark.parametrize(("op", "dtype"), CASES)
def test_masked_row_extremes_vectorize(op, dtype, capsys, tmp_path):
    with config.scope(dump="llvm_ir", cache_dir=tmp_path):
        _masked_rows(op, dtype).execute(list(_inputs(dtype, 4, 64, 0)))
    ir_text = capsys.readouterr().err
    if dtype == "int32":
        assert "x i32>" in ir_text
    else:
        assert f"@llvm.{'maximum' if op == 'max' else 'minimum'}.v" in ir_text  # a vector max/min


@pytest.mark.parametrize(("op", "dtype"), CASES)
@pytest.mark.parametrize(("rows", "width"), [(3, 1), (5, 37), (7, 130)])
def test_masked_row_extremes_match_numpy(op, dtype, rows, width):
    x, mask = _inputs(dtype, rows, width, rows * width)
    with config.scope(enable="poison_outputs"):
        (got,) = _masked_rows(op, dtype).execute([x, mask])
    want = getattr(np, op)(np.where(mask, x, np.array(_fill(op, dtype), dtype)), axis=1, initial=_fill(op, dtype))
    np.testing.assert_array_equal(got, want)


def test_float_extremes_fold_without_ordering_zeros(capsys, tmp_path):
    with config.scope(dump="llvm_ir", cache_dir=tmp_path):
        with bz.Fusion() as f:
            x = f.define_tensor((-1, -1))
            f.add_output(bz.ops.max(x, axes=[1]))
            f.add_output(bz.ops.min(x, axes=[1]))
        rows = np.array([[-0.0, 0.0] * 32, [0.0, -0.0] * 32, [-0.0] * 64, [np.nan] + [-0.0] * 63], np.float32)
        top, bottom = f.execute([rows])
    assert re.search(r"call nsz <\d+ x float> @llvm\.maximum", capsys.readouterr().err)
    np.testing.assert_array_equal(top, [0.0, 0.0, 0.0, np.nan])  # either zero; a NaN still propagates
    np.testing.assert_array_equal(bottom, [0.0, 0.0, 0.0, np.nan])
