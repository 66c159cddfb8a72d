"""Sizes given at run time, as nvFuser's definitions give them: integer scalar inputs (`define_scalar(dtype=
DataType.Int)`, `define_vector(n)`) as the extents of `reshape`, `full`, `slice`, `select` and `arange`,
each a symbolic extent bound from the value at every call, so one compiled kernel serves every value;
hypothesis draws the sizes, bounds and indices of one such fusion against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu
from fuzz_scale import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import engine
from braze.compile import nvrtc

DataType = bz.DataType
RNG = np.random.default_rng(11)
BACKENDS = ("reference", "llvm")


def sample(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def run_everywhere(fd: bz.Fusion, inputs: list) -> list[list[np.ndarray]]:
    """The outputs on the reference backend, the LLVM backend and (where g++ is) the generated CUDA run
    on the CPU, after NVRTC compiled it."""
    results = [fd.execute(inputs, backend=backend) for backend in BACKENDS]
    if available():
        nvrtc.compile_ptx(engine.cuda_source(fd, inputs).text, fd.name, "sm_90")
        results.append(run_on_cpu(fd, inputs)[0])
    return results


def test_reshape_to_sizes_given_at_run_time_reuses_one_kernel() -> None:
    with bz.Fusion() as fd:
        x = fd.define_tensor([-1, -1], [True, True])
        d1, d2 = fd.define_scalar(dtype=DataType.Int32), fd.define_scalar(dtype=DataType.Int32)
        fd.add_output(fd.ops.sum(fd.ops.reshape(x, [fd.ops.size(x, 0), d1, d2]), [2]))
    x = sample(3, 12)
    for d1, d2 in ((3, 4), (12, 1), (1, 12), (6, 2)):
        for got in run_everywhere(fd, [x, d1, d2]):
            np.testing.assert_allclose(got[0], x.reshape(3, d1, d2).sum(2), rtol=1e-5, atol=1e-6)
    assert len(engine._cache_of(fd).entries) == 1  # the sizes are values of the call, not of the signature
    with pytest.raises(bz.InputError, match=r"reshape of T0 to \[T0_s0, T1_value, T2_value\]: element counts: "
                                            r"got extents 36 and 45"):
        fd.execute([x, 3, 5])
    with pytest.raises(bz.InputError, match=r"input 1 \(T1\): expected a non-negative integer \(it sizes a shape "
                                            r"of the fusion\), got -3"):
        fd.execute([x, -3, -4])


def test_full_of_sizes_and_value_given_at_run_time() -> None:
    with bz.Fusion() as fd:
        rows, columns = fd.define_scalar(None, dtype=DataType.Int), fd.define_scalar(None, dtype=DataType.Int)
        value = fd.define_scalar(None, dtype=DataType.Float)
        t = fd.define_tensor([-1, -1])
        fd.add_output(fd.ops.add(fd.ops.full((rows, columns), value, DataType.Float), t))
    for shape in ((5, 10), (1, 3), (0, 4)):
        t = sample(*shape)
        for got in run_everywhere(fd, [*shape, 2.5, t]):
            np.testing.assert_allclose(got[0], t + 2.5, rtol=1e-6)
    with pytest.raises(bz.InputError):  # the full's extents and the tensor's must agree
        fd.execute([4, 4, 1.0, sample(5, 10)])


def test_select_at_an_index_given_at_run_time() -> None:
    with bz.Fusion() as fd:
        t = fd.define_tensor([-1, -1])
        index = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.select(t, index, 1))
        fd.add_output(fd.ops.select(t, index, 0))
    x = sample(4, 4)
    for i in range(4):
        for got in run_everywhere(fd, [x, i]):
            np.testing.assert_array_equal(got[0], x[:, i])
            np.testing.assert_array_equal(got[1], x[i])
    with pytest.raises(bz.InputError, match=r"index T1_value of dimension 1 must lie within its extent"):
        fd.execute([x, 4])


def test_define_vector_sizes_slices_one_by_one_or_as_a_list() -> None:
    x = sample(2, 5, 10)
    with bz.Fusion() as fd:
        t = fd.define_tensor([-1, -1, -1])
        starts, ends = fd.define_vector(3), fd.define_vector(3)
        fd.add_output(fd.ops.slice(t, starts, ends))
        fd.add_output(fd.ops.slice(t, start_indices=[0, 1, 2], end_indices=t.shape(), strides=[1, 1, 1],
                                   manual_normalization=0))
    assert [s.dtype for s in starts] == [bz.int64] * 3
    for inputs in ([x, 0, 1, 2, 2, 5, 10], [x, [0, 1, 2], (2, 5, 10)]):
        for got in run_everywhere(fd, inputs) if inputs[1] == 0 else [fd.execute(inputs)]:
            np.testing.assert_array_equal(got[0], x[:, 1:, 2:])
            np.testing.assert_array_equal(got[1], x[:, 1:, 2:])
    (narrower, _), = [fd.execute([x, [1, 0, 3], [2, 4, 7]])]
    np.testing.assert_array_equal(narrower, x[1:2, 0:4, 3:7])


def test_reshape_by_a_vector_given_as_one_list() -> None:
    x = sample(*[2] * 6)
    with bz.Fusion() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.sum(fd.ops.reshape(t, fd.define_vector(4)), dims=[3]))
    for shape in ([2, 2, 2, 8], [4, 4, 2, 2], [8, 1, 1, 8]):
        np.testing.assert_allclose(fd.execute([x, shape])[0], x.reshape(shape).sum(3), rtol=1e-5, atol=1e-6)


def test_a_size_computed_from_constants_is_its_number() -> None:
    x = sample(3)
    with bz.Fusion() as fd:
        t = fd.define_tensor([-1])
        width = fd.ops.cast(fd.ops.mul(fd.define_scalar(2.5), fd.define_scalar(2)), DataType.Int)
        fd.add_output(fd.ops.pad(t, [width, width]))
    for got in run_everywhere(fd, [x]):
        np.testing.assert_array_equal(got[0], np.pad(x, 5))


def test_a_float_scalar_input_as_a_size_is_named() -> None:
    with bz.Fusion() as fd:
        t = fd.define_tensor([-1])
        n = fd.define_scalar(dtype=DataType.Float)
        with pytest.raises(bz.FusionDefinitionError, match=r"^reshape: shape\[0\]: expected an integer scalar, "
                                                           r"got T1 of type float32$"):
            fd.ops.reshape(t, [n, -1])


def test_define_scalar_without_a_value_or_dtype_is_a_double_input_as_in_nvfuser() -> None:
    with bz.Fusion() as fd:
        t = fd.define_tensor([-1])
        s = fd.define_scalar()
        fd.add_output(fd.ops.mul(t, s))
    assert s.dtype == bz.float64
    x = sample(4)
    np.testing.assert_allclose(fd.execute([x, 0.1])[0], x * np.float32(0.1), rtol=1e-6)


def test_jit_takes_a_runtime_int_as_a_size_without_tracing_again() -> None:
    traces = []

    @bz.jit
    def head(x, n):
        traces.append(n)
        return x[:n] * 2 + bz.ops.arange(n) + x.reshape(n, -1).sum(1).sum()

    x = np.arange(12.0, dtype=np.float32)
    for n in (2, 3, 4, 6):
        np.testing.assert_allclose(head(x, n), x[:n] * 2 + np.arange(n) + x.sum(), rtol=1e-6)
    assert len(traces) == 1


def _runtime_sized_fusion() -> bz.Fusion:
    """A reshape to three sizes, a slice to bounds and a select at an index, all given at run time."""
    with bz.Fusion() as fd:
        x = fd.define_tensor([-1, -1])
        d0, d1, d2 = fd.define_vector(3)
        starts, ends = fd.define_vector(2), fd.define_vector(2)
        index = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.sum(fd.ops.reshape(x, [d0, d1, d2]), [1]))
        fd.add_output(fd.ops.mul(fd.ops.slice(x, starts, ends), 2.0))
        fd.add_output(fd.ops.select(x, index, 1))
    return fd


_FUSION = _runtime_sized_fusion()


@st.composite
def _sizes(draw):
    rows, columns = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    count = rows * columns
    d0 = draw(st.sampled_from([d for d in range(1, count + 1) if count % d == 0]))
    d1 = draw(st.sampled_from([d for d in range(1, count // d0 + 1) if (count // d0) % d == 0]))
    bounds = [sorted(draw(st.lists(st.integers(0, n), min_size=2, max_size=2))) for n in (rows, columns)]
    return rows, columns, (d0, d1, count // d0 // d1), bounds, draw(st.integers(0, columns - 1))


@settings(max_examples=examples(40), deadline=None)
@given(_sizes())
def test_random_sizes_given_at_run_time_match_numpy_on_one_compiled_kernel(sizes) -> None:
    rows, columns, shape, ((r0, r1), (c0, c1)), index = sizes
    x = RNG.standard_normal((rows, columns)).astype(np.float32)
    inputs = [x, list(shape), [r0, c0], [r1, c1], index]
    for backend in BACKENDS:
        summed, sliced, picked = _FUSION.execute(inputs, backend=backend)
        np.testing.assert_allclose(summed, x.reshape(shape).sum(1), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(sliced, x[r0:r1, c0:c1] * 2)
        np.testing.assert_array_equal(picked, x[:, index])
