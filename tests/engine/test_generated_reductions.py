"""Generated reductions over every mix of axes (rank 1-4, extents 0, 1, odd and a few hundred, kept
dimensions or not, float32 and float64, with a pointwise op before and after), against a float64
NumPy reference: on the CPU backend here, on the GPU under `@pytest.mark.cuda` (where they take each
CUDA schedule: rows, split rows, columns, flat), and their CUDA kernels compiled with NVRTC in
batches. A failure prints the case."""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze as bz
from braze import config, engine
from braze.codegen import cuda
from braze.compile import cuda_driver, nvrtc

REFERENCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
EXTENTS = [0, 1, 2, 3, 5, 17, 33, 64, 130]
MAX_NUMEL = 40000


@dataclass(frozen=True)
class Case:
    op: str
    shape: tuple[int, ...]
    axes: tuple[int, ...] | None
    keepdim: bool
    dtype: bz.DType

    def fusion(self, name: str = "fusion") -> bz.Fusion:
        with bz.Fusion(name=name) as f:
            x = f.define_tensor([-1] * len(self.shape), dtype=self.dtype)
            reduced = getattr(bz.ops, self.op)(bz.ops.abs(x) * 2.0 - 1.0, axes=self.axes, keepdim=self.keepdim)
            f.add_output(reduced * 0.5)
        return f

    def input(self) -> np.ndarray:
        seed = zlib.crc32(repr((self.op, self.shape, self.axes, self.keepdim, self.dtype.name)).encode())
        return np.random.default_rng(seed).standard_normal(self.shape).astype(self.dtype.numpy)

    def expected(self, x: np.ndarray) -> np.ndarray:
        values = np.abs(x.astype(np.float64)) * 2.0 - 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the mean of nothing is NaN
            return REFERENCE[self.op](values, axis=self.axes, keepdims=self.keepdim) * 0.5

    def check(self, got, x: np.ndarray) -> None:
        expected = self.expected(x)
        count = max(x.size // max(np.size(expected), 1), 1)
        tolerance = (1e-6 if self.dtype == bz.float32 else 1e-14) * max(count, 1) ** 0.5 * 4
        np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=tolerance, atol=tolerance,
                                   err_msg=repr(self))


@st.composite
def cases(draw) -> Case:
    op = draw(st.sampled_from(sorted(REFERENCE)))
    extents = [e for e in EXTENTS if e or op in ("sum", "mean")]  # max and min of nothing raise
    shape = tuple(draw(st.lists(st.sampled_from(extents), min_size=1, max_size=4)))
    if int(np.prod(shape)) > MAX_NUMEL:
        shape = tuple(min(e, 5) for e in shape)
    some_axes = st.sets(st.integers(0, len(shape) - 1), min_size=1).map(lambda s: tuple(sorted(s)))
    axes = draw(st.one_of(st.none(), some_axes))
    return Case(op, shape, axes, draw(st.booleans()), draw(st.sampled_from([bz.float32, bz.float64])))


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@SETTINGS
@given(cases())
def test_generated_reductions_on_the_cpu(case: Case):
    x = case.input()
    (got,) = case.fusion().execute([x])
    case.check(got, x)


@pytest.mark.cuda
@pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")
@settings(SETTINGS, max_examples=150)
@given(cases())
def test_generated_reductions_on_the_gpu(case: Case):
    x = case.input()
    with config.scope(enable="poison_outputs"):
        (got,) = case.fusion().execute([x], device="cuda")
    case.check(got, x)


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@settings(SETTINGS, max_examples=3)
@given(st.lists(cases(), min_size=12, max_size=12))
def test_generated_reductions_compile_with_nvrtc(batch: list[Case]):
    bodies = [engine.cuda_source(case.fusion(f"case{n}"), [case.input()]).body for n, case in enumerate(batch)]
    assert nvrtc.compile_ptx(cuda.with_prelude("\n".join(bodies)), "generated", "sm_90", ("-G",))
