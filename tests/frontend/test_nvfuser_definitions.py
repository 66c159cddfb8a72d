"""Fusion definitions as nvFuser's Python frontend writes them (`fd.ops.*`, `DataType.*`, `t.shape()`,
`from_pytorch`) run on a `bz.Fusion` unchanged and mean what they mean in nvFuser."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze.ops.math_compositions import REFERENCES

DataType = bz.DataType
RNG = np.random.default_rng(7)


def sample(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def run(fd: bz.Fusion, inputs: list) -> list:
    return fd.execute(inputs, backend="reference")


def test_var_and_var_mean_default_to_the_sample_variance_as_in_nvfuser() -> None:
    x = sample(3, 5)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([-1, -1])
        var, mean = fd.ops.var_mean(t0, [-1])
        fd.add_output(var)
        fd.add_output(mean)
        fd.add_output(fd.ops.var(t0, [0], 0))  # nvFuser's third argument is the correction
        fd.add_output(fd.ops.var(t0, dims=[1], correction=0, keepdim=True))
    var, mean, population, kept = run(fd, [x])
    np.testing.assert_allclose(var, x.var(-1, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(mean, x.mean(-1), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(population, x.var(0), rtol=1e-5)
    np.testing.assert_allclose(kept, x.var(1, keepdims=True), rtol=1e-5)


def test_select_takes_the_index_before_the_dimension() -> None:
    x = sample(4, 4, 4)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([-1, -1, -1])
        fd.add_output(fd.ops.select(t0, 2, 1))
        fd.add_output(fd.ops.select(t0, fd.define_scalar(3), dim=0))
    middle, first = run(fd, [x])
    np.testing.assert_array_equal(middle, x[:, 2])
    np.testing.assert_array_equal(first, x[3])


def test_pad_takes_flat_widths_from_the_last_dimension_as_nvfuser() -> None:
    x = sample(1, 2, 3)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([1, -1, -1])
        fd.add_output(fd.ops.pad(t0, [2, 3]))
        fd.add_output(fd.ops.pad(t0, [0, 0, 1, 2], fd.define_scalar(2.0)))
        with pytest.raises(bz.FusionDefinitionError, match=r"pad: pad_widths: expected an even number of widths"):
            fd.ops.pad(t0, [1, 2, 3])
    last, middle = run(fd, [x])
    np.testing.assert_array_equal(last, np.pad(x, [(0, 0), (0, 0), (2, 3)]))
    np.testing.assert_array_equal(middle, np.pad(x, [(0, 0), (1, 2), (0, 0)], constant_values=2.0))


def test_a_negative_pad_width_cuts_as_in_nvfuser_and_torch() -> None:
    torch = pytest.importorskip("torch")
    x = sample(2, 5, 6)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([-1, -1, -1])
        fd.add_output(fd.ops.pad(t0, [-1, 2, 1, -2], fd.define_scalar(7.0)))
        fd.add_output(fd.ops.cat([t0, t0], 1, manual_padding=True))
        fd.add_output(fd.ops.squeeze(fd.ops.slice(t0, [0, 0, 0], [1, 5, 6]), [0], squeeze_expanded=True))
    for backend in ("reference", "llvm"):
        padded, joined, first = fd.execute([x], backend=backend)
        want = torch.nn.functional.pad(torch.from_numpy(x), [-1, 2, 1, -2], value=7.0).numpy()
        np.testing.assert_array_equal(padded, want)
        np.testing.assert_array_equal(joined, np.concatenate([x, x], 1))
        np.testing.assert_array_equal(first, x[0])


def test_welford_gives_mean_sum_of_squares_and_count() -> None:
    x = sample(2, 6)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([-1, -1])
        mean, var_sum, n = fd.ops.welford(t0, [-1])
        fd.add_output(fd.ops.div(var_sum, n))
        fd.add_output(mean)
        fd.add_output(n)
    var, mean, n = run(fd, [x])
    np.testing.assert_allclose(var, x.var(-1), rtol=1e-5)
    np.testing.assert_allclose(mean, x.mean(-1), rtol=1e-5, atol=1e-7)
    assert n.dtype == np.int64 and (n == 6).all()


def test_reductions_take_nvfusers_dtype_forms() -> None:
    x = np.ones((2, 4, 8), np.float16)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([-1, -1, -1], DataType.Half)
        fd.add_output(fd.ops.prod(t0, DataType.Float))  # every dimension, into that dtype
        fd.add_output(fd.ops.sum(t0, [-1], False, DataType.Float))
        fd.add_output(fd.ops.sum(t0, dims=[0], keepdim=False, dtype=DataType.Null))
        fd.add_output(fd.ops.max(t0, dims=[1], keepdim=True, dtype=DataType.Null))
    whole, rows, column, top = run(fd, [x])
    assert whole.shape == () and whole.dtype == np.float32 and whole == 1
    assert rows.dtype == np.float32 and (rows == 8).all()
    assert column.dtype == np.float16 and (column == 2).all()
    assert top.shape == (2, 1, 8) and (top == 1).all()


def test_shapes_and_sizes_as_nvfuser_reads_them() -> None:
    a, b = sample(2, 3, 4), sample(4)
    with bz.Fusion() as fd:
        t0, t1 = fd.from_pytorch(a), fd.from_pytorch(b)
        fd.add_output(fd.ops.sub(t0, fd.ops.broadcast_in_dim(t1, t0.shape(), [2])))
        fd.add_output(fd.ops.reshape(t0, [fd.ops.size(t0, 0), fd.ops.at(fd.ops.shape(t0), 1) * 4]))
        fd.add_output(fd.ops.broadcast(t1, is_broadcast_dim=[True, False]))
    centred, flat, row = run(fd, [a, b])
    np.testing.assert_array_equal(centred, a - b)
    np.testing.assert_array_equal(flat, a.reshape(2, 12))
    np.testing.assert_array_equal(row, b[None])


def test_nvfusers_names_of_braze_ops() -> None:
    i, j = np.array([7, -7, 6, -1]), np.array([2, 2, -4, 3])
    with bz.Fusion() as fd:
        a, b = fd.define_tensor([-1], DataType.Int), fd.define_tensor([-1], DataType.Int)
        fd.add_output(fd.ops.div(a, b))  # C's division: toward zero
        fd.add_output(fd.ops.div(fd.ops.cast(a, DataType.Float), b))
        fd.add_output(fd.ops.bitwise_left_shift(a, 2))
        fd.add_output(fd.ops.bitwise_right_shift(a, 1))
        fd.add_output(fd.ops.iota(fd.define_scalar(3), fd.define_scalar(100), fd.define_scalar(2), DataType.Int32))
        fd.add_output(fd.ops.segment_set(fd.ops.neg(a)))
    quotient, true_quotient, left, right, iota, negated = run(fd, [i, j])
    np.testing.assert_array_equal(quotient, [3, -3, -1, 0])
    np.testing.assert_allclose(true_quotient, i / j, rtol=1e-6)
    np.testing.assert_array_equal(left, i << 2)
    np.testing.assert_array_equal(right, i >> 1)
    assert iota.dtype == np.int32 and iota.tolist() == [100, 102, 104]
    np.testing.assert_array_equal(negated, -i)
    with pytest.raises(bz.UnsupportedError, match=r"write bz.ops.take_along_axis\(x, index, dim\)"):
        bz.ops.gather  # noqa: B018  (braze's name differs: the error says which to write)


def test_gathers_take_nvfusers_arguments() -> None:
    """nvFuser's gather(arg, index, dim) is torch's arg.gather(dim, index); index_select(arg, index, dim)
    and take_along_axis(arg, index, dim) as torch's and NumPy's."""
    x = sample(4, 5)
    rows = np.array([3, 0, 3], np.int64)
    picks = np.array([[4, 0], [1, 1], [0, 2]], np.int64)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([-1, -1])
        t1 = fd.define_tensor([-1], DataType.Int)
        t2 = fd.define_tensor([-1, -1], DataType.Int)
        fd.add_output(fd.ops.gather(t0, t2, 1))
        fd.add_output(fd.ops.index_select(t0, t1, 0))
        fd.add_output(fd.ops.take_along_axis(fd.ops.index_select(t0, t1, 0), t2, 1))
    gathered, selected, taken = run(fd, [x, rows, picks])
    np.testing.assert_array_equal(gathered, np.take_along_axis(x[:3], picks, 1))
    np.testing.assert_array_equal(selected, x[rows])
    np.testing.assert_array_equal(taken, np.take_along_axis(x[rows], picks, 1))


def test_stride_order_op_lays_out_the_output() -> None:
    x = sample(2, 3, 4)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([-1, -1, -1])
        fd.add_output(fd.ops.stride_order(fd.ops.add(t0, 3.0), [0, 1, 2]))
    (y,) = fd.execute([x])
    np.testing.assert_array_equal(y, x + 3)
    assert y.strides == (4, 8, 24)  # dimension 0 fastest


def test_dtype_names_nvfuser_has_and_braze_lacks() -> None:
    assert DataType.Null is None and DataType.Index is bz.int64 and DataType.UInt64 is bz.uint64
    with pytest.raises(bz.UnsupportedError, match=r"^DataType\.ComplexFloat: braze has no complex64 dtype"):
        DataType.ComplexFloat  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'Floaty'"):
        DataType.Floaty  # noqa: B018


def test_inputs_as_nvfuser_defines_them() -> None:
    x, b = sample(2, 3), sample(1, 3)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([-1, -1], [True, True], DataType.Double)  # shape, contiguity, dtype
        t1 = fd.define_tensor(sizes=b.shape, strides=(3, 1))  # a size of 1 broadcasts
        t2 = fd.define_tensor([-1, -1], [True, False])
        fd.add_output(fd.ops.add(fd.ops.add(t0, t1), t2))
    assert t1.shape[0] == 1
    (y,) = run(fd, [x.astype(np.float64), b, x])
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, x + b + x)


def test_alias_input_writes_in_place_and_returns_nothing_as_in_nvfuser() -> None:
    x = np.ones((4, 4), np.float32)
    with bz.Fusion() as fd:
        t0 = fd.define_tensor([-1, -1])
        t1 = fd.ops.add(t0, fd.define_scalar(1.0))
        fd.add_output(t1, alias_input=t0)
        fd.add_output(fd.ops.add(t1, fd.define_scalar(2.0)))
        with pytest.raises(bz.FusionDefinitionError, match="expected one of alias=, alias_input=, got both"):
            fd.add_output(t1, alias=t0, alias_input=t0)
    (y,) = fd.execute([x])
    assert (x == 2).all() and (y == 4).all()


def test_an_input_given_second_to_add_output_is_written_in_place_as_in_nvfuser() -> None:
    """nvFuser's `add_output(t, inp)`, as a running mean's update writes it: into `inp`, not returned."""
    x, running = sample(8, 3), np.zeros(3, np.float32)
    with bz.Fusion() as fd:
        t0, mean = fd.define_tensor([-1, -1]), fd.define_tensor([-1])
        batch = fd.ops.sum(t0, [0])
        fd.add_output(fd.ops.add(fd.ops.mul(mean, 0.9), fd.ops.mul(batch, 0.1 / 8)), mean)
        fd.add_output(batch)
    (total,) = fd.execute([x, running])
    np.testing.assert_allclose(total, x.sum(0), rtol=1e-5)
    np.testing.assert_allclose(running, x.mean(0) * 0.1, rtol=1e-5, atol=1e-7)


def test_addcmul_takes_a_scalar_of_the_fusion_as_its_value() -> None:
    a, b, c = sample(4), sample(4), sample(4)
    with bz.Fusion() as fd:
        t0, t1, t2 = (fd.define_tensor([-1]) for _ in range(3))
        fd.add_output(fd.ops.addcmul(t0, t1, t2, fd.define_scalar(0.5)))
        fd.add_output(fd.ops.addcdiv(t0, t1, t2, fd.define_scalar(dtype=DataType.Float)))
    product, quotient = run(fd, [a, b, c, 2.0])
    np.testing.assert_allclose(product, a + 0.5 * b * c, rtol=1e-6)
    np.testing.assert_allclose(quotient, a + 2.0 * b / c, rtol=1e-5)


def test_embedding_fwd_gathers_rows_and_renormalizes_them_as_torch() -> None:
    torch = pytest.importorskip("torch")
    ids = torch.tensor([3, 0, 3, 9, 4])
    weight = torch.randn(10, 6, dtype=torch.float32) * 2
    for with_norm in (False, True):
        with bz.Fusion() as fd:
            i, w = fd.from_pytorch(ids), fd.from_pytorch(weight)
            optional = [fd.define_scalar(dtype=DataType.Float), fd.define_scalar(dtype=DataType.Float)] \
                if with_norm else []
            fd.add_output(fd.ops.embedding_fwd(i, w, None, *optional))
        inputs = [ids, weight] + ([1.5, 3.0] if with_norm else [])
        want = torch.nn.functional.embedding(ids, weight.clone(), max_norm=1.5 if with_norm else None, norm_type=3.0)
        for backend in ("reference", "llvm"):
            torch.testing.assert_close(fd.execute(inputs, backend=backend)[0], want, rtol=1e-5, atol=1e-6)


def test_signbit_logical_right_shift_and_a_zero_dimensional_index_as_nvfuser() -> None:
    x = np.array([-1.5, -0.0, 0.0, 2.0, -np.inf], np.float32)
    n = np.array([-8, -1, 1, 2**31 - 1, 256], np.int32)
    with bz.Fusion() as fd:
        t, m = fd.define_tensor([-1]), fd.define_tensor([-1], dtype=DataType.Int32)
        fd.add_output(fd.ops.signbit(t))
        fd.add_output(fd.ops.logical_right_shift(m, 3))
        fd.add_output(fd.ops.logical_right_shift(m, fd.define_scalar(32, dtype=DataType.Int32)))
        table = fd.define_tensor([-1, -1])
        fd.add_output(fd.ops.index_select(table, fd.define_tensor([], dtype=DataType.Int), 0))
    rows = sample(4, 3)
    for backend in ("reference", "llvm"):
        sign, shifted, all_out, picked = fd.execute([x, n, rows, np.array(2)], backend=backend)
        np.testing.assert_array_equal(sign, np.signbit(x))
        np.testing.assert_array_equal(shifted, (n.view(np.uint32) >> 3).view(np.int32))
        np.testing.assert_array_equal(all_out, np.zeros(5, np.int32))
        np.testing.assert_array_equal(picked, rows[2:3])  # torch's index_select keeps the dimension


def test_nvfusers_small_elementwise_ops_and_a_dtype_given_first_to_define_scalar() -> None:
    x = np.array([-2.5, -0.0, 1.75, np.inf, -np.inf, np.nan, 0.3], np.float32)
    n = np.array([-7, 7, -8, 9], np.int64)
    with bz.Fusion() as fd:
        t, m = fd.define_tensor([-1]), fd.define_tensor([-1], dtype=DataType.Int)
        k = fd.define_scalar(DataType.Int)  # nvFuser's: the dtype of a scalar input, given first
        fd.add_output(fd.ops.frac(t))
        fd.add_output(fd.ops.isposinf(t))
        fd.add_output(fd.ops.isneginf(t))
        fd.add_output(fd.ops.isreal(t))
        fd.add_output(fd.ops.mod(m, k))
        fd.add_output(fd.ops.erfcinv(fd.ops.abs(fd.ops.sin(t))))
    assert k.dtype == bz.int64
    for backend in ("reference", "llvm"):
        frac, pos, neg, real, mod, inverse = fd.execute([x, n, 3], backend=backend)
        np.testing.assert_array_equal(frac[:3], [-0.5, -0.0, 0.75])
        np.testing.assert_array_equal(pos, np.isposinf(x))
        np.testing.assert_array_equal(neg, np.isneginf(x))
        assert real.dtype == np.bool_ and real.all()
        np.testing.assert_array_equal(mod, np.fmod(n, 3))  # C's remainder: the dividend's sign
        with np.errstate(invalid="ignore"):
            want = REFERENCES["erfinv"](1 - np.abs(np.sin(x.astype(np.float64))))
        np.testing.assert_allclose(inverse, want, rtol=1e-5, atol=1e-6)
