"""Fusions whose rows branch on the column (cat, pad, RoPE's rotate_half, a where on an iota) after
their loops are split at the branches (braze/passes/split_loops.py): results on the CPU against
NumPy in float64, for the CPU's Kernel IR and for the GPU's (run on the CPU), at odd split points,
and the CUDA of RoPE, whose two halves then both move 4 elements at a time (compiled with NVRTC).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import config, engine
from braze.codegen import cuda
from braze.compile import nvrtc
from braze.kir import kernel_text


def rope(x, cos, sin, dtype=None):
    """RoPE over the last axis as the suite's case writes it, for braze and NumPy alike."""
    half = x.shape[-1] // 2
    if isinstance(x, np.ndarray):
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rotated * sin
    as_f32 = lambda t: bz.ops.cast(t, bz.float32)  # noqa: E731
    xf = as_f32(x)
    rotated = bz.ops.cat([-xf[..., half:], xf[..., :half]], -1)
    return bz.ops.cast(xf * as_f32(cos) + rotated * as_f32(sin), dtype or x.dtype)


def rope_fusion(d: int, dtype) -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1, d), dtype=dtype)
        cos, sin = (f.define_tensor((1, -1, 1, d), dtype=dtype) for _ in range(2))
        f.add_output(rope(x, cos, sin))
    return f


def rope_inputs(shape, dtype, rng) -> list[np.ndarray]:
    x = rng.standard_normal(shape).astype(dtype.numpy)
    tables = [fn(rng.uniform(0, 6, (1, shape[1], 1, shape[3]))).astype(dtype.numpy) for fn in (np.cos, np.sin)]
    return [x, *tables]


def run(f: bz.Fusion, inputs: list, planned_for: str) -> list[np.ndarray]:
    """The outputs on the CPU backend, of the CPU's Kernel IR or (planned_for="gpu") the GPU's."""
    with config.scope(enable="poison_outputs"):
        if planned_for == "cpu":
            return f.execute(inputs, backend="llvm")
        bound = engine.bind_inputs(f, inputs)
        key = engine.signature(f, bound)
        return engine.compile_fusion(f, key, engine.lower_fusion(f, key, device_index=0)).run(bound)


def close(got: np.ndarray, want: np.ndarray, dtype) -> None:
    tolerance = 1e-5 if dtype == bz.float32 else 2e-2
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tolerance, atol=tolerance)


def planned(f: bz.Fusion, inputs: list, gpu: bool) -> str:
    bound = engine.bind_inputs(f, inputs)
    return kernel_text(engine.plan_kernel(f, engine.signature(f, bound), views_on_host=not gpu, gpu=gpu)[1])


@pytest.mark.parametrize("planned_for", ["cpu", "gpu"])
@pytest.mark.parametrize("shape", [(2, 5, 3, 128), (1, 3, 2, 34), (3, 1, 1, 2), (2, 4, 5, 6)], ids=str)
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=str)
def test_rope_matches_numpy(shape, dtype, planned_for):
    f = rope_fusion(shape[3], dtype)
    inputs = rope_inputs(shape, dtype, np.random.default_rng(sum(shape)))
    (got,) = run(f, inputs, planned_for)
    close(got, rope(*(a.astype(np.float64) for a in inputs)), dtype)
    if shape[3] == 128:  # the rows' loop, split at 64: no branch left
        text = planned(f, inputs, planned_for == "gpu")
        assert "range(0:int32, 64:int32)" in text and "range(64:int32, 128:int32)" in text and "if " not in text


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_both_halves_of_rope_move_sixteen_bytes_at_a_time():
    f = rope_fusion(128, bz.bfloat16)
    src = engine.cuda_source(f, rope_inputs((2, 16, 4, 128), bz.bfloat16, np.random.default_rng(0)))
    body = src.body
    halves = re.findall(r"for \(int (\w+) = (?:64 \+ )?8 \* lane; \1 < (\d+);", body)
    assert [end for _, end in halves] == ["64", "128"]
    for name, _ in halves:  # x and the rotated x, cos, sin: four 16-byte loads, one store
        loop = body[body.index(f"for (int {name} ="):]
        loop = loop[:loop.index("} else {")]
        assert loop.count("const bz_bfloat168 v") == 4 and loop.count("*reinterpret_cast<bz_bfloat168*>") == 1
    (first, _), (second, _) = halves
    assert f"bz_add({first}, 64)" in body and f"bz_sub({second}, 64)" in body  # x[j + 64], then x[j - 64]
    nvrtc.compile_ptx(cuda.with_prelude(body), "rope", "sm_90", ())


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16, bz.float64], ids=str)
def test_split_cat_pad_and_iota_rows_compile_with_nvrtc(dtype):
    """Parts starting at a symbolic column (a cat's edge at an input's extent) take the 16-byte path."""
    with bz.Fusion() as f:
        x, y, z = (f.define_tensor((-1, -1), dtype=dtype) for _ in range(3))
        f.add_output(bz.ops.cat([x, y, z], 1) * 2.0)
        f.add_output(bz.ops.pad(x, [(0, 0), (3, 5)], 1.5))
        f.add_output(bz.ops.where(bz.ops.arange(y.shape[1]) < 7, y, -y))
    arrays = [np.ones((4, w), dtype.numpy) for w in (8, 12, 4)]
    src = engine.cuda_source(f, arrays)
    width = 16 // dtype.itemsize if dtype.itemsize == 2 else 4  # 2-byte types move eight at a time
    vector_loops = re.findall(rf"for \(int \w+_{width} = (.*?){width} \* lane;", src.body)
    # Each part twice: over rows the width divides, and over the others' vectors after a head of single
    # elements up to the vectors' alignment and before a tail (cuda_peel); 5 of the 8 parts start at
    # a column other than 0.
    whole = [begin for begin in vector_loops if "bz_head" not in begin]
    peeled = [begin for begin in vector_loops if "bz_head" in begin]
    assert len(whole) == len(peeled) == 3 + 3 + 2 and sum(begin != "" for begin in whole) == 2 + 2 + 1
    nvrtc.compile_ptx(cuda.with_prelude(src.body), "parts", "sm_90", ())


# --- generated fusions: cat, pad, rotations and iota masks at odd places ----------------------------
@st.composite
def edge_fusions(draw):
    """(fusion, inputs, the NumPy float64 function of the inputs, dtype): one of cat, pad, a rotation,
    or a where on an iota along the last axis, of odd widths, times a row vector, on a transposed
    input when drawn so."""
    dtype = draw(st.sampled_from([bz.float32, bz.bfloat16]))
    rows, width = draw(st.integers(1, 4)), draw(st.integers(1, 19))
    kind = draw(st.sampled_from(["cat", "pad", "rotate", "iota"]))
    widths = [width, draw(st.integers(0, 7)), draw(st.integers(1, 5))]
    lo, hi, shift = draw(st.integers(0, 5)), draw(st.integers(0, 5)), draw(st.integers(0, width))
    value = draw(st.sampled_from([0.0, -1.5]))
    transposed = draw(st.booleans())
    total = {"cat": sum(widths), "pad": width + lo + hi}.get(kind, width)

    def build(ops, xs, row):
        x = xs[0]
        if kind == "cat":
            out = ops.cat(list(xs), 1)
        elif kind == "pad":
            out = ops.pad(x, [(0, 0), (lo, hi)], value)
        elif kind == "rotate":
            out = ops.cat([-x[:, shift:], x[:, :shift]], 1)
        else:
            out = ops.where(ops.arange(x.shape[1]) < shift, x, x * -2.0)
        return out * row

    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    count = 3 if kind == "cat" else 1
    arrays = [rng.uniform(-2, 2, (rows, w)).astype(dtype.numpy) for w in widths[:count]]
    if transposed:
        arrays = [np.ascontiguousarray(a.T).T for a in arrays]
    row = rng.uniform(-2, 2, total).astype(dtype.numpy)
    with bz.Fusion() as f:
        xs = [f.define_tensor((-1, -1), dtype=dtype) for _ in arrays]
        f.add_output(build(bz.ops, xs, f.define_tensor((-1,), dtype=dtype)))
    return f, [*arrays, row], lambda *a: build(NUMPY, list(a[:-1]), a[-1]), dtype


class NUMPY:
    """The ops the generated fusions use, in NumPy."""

    cat = staticmethod(lambda xs, axis: np.concatenate(xs, axis=axis))
    pad = staticmethod(lambda x, widths, value: np.pad(x, widths, constant_values=value))
    where = staticmethod(np.where)
    arange = staticmethod(np.arange)


@settings(max_examples=40, deadline=None)
@given(edge_fusions(), st.sampled_from(["cpu", "gpu"]))
def test_generated_cat_pad_and_rotations_match_numpy(fusion, planned_for):
    f, inputs, reference, dtype = fusion
    (got,) = run(f, inputs, planned_for)
    close(got, reference(*(a.astype(np.float64) for a in inputs)), dtype)
