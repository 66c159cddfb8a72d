"""Views, layout and broadcast ops against NumPy's own indexing and shape functions (their spec):
permute, transpose, reshape, squeeze, unsqueeze, slice and `x[...]`, pad, cat, flip, broadcast,
expand and broadcast_in_dim, on every dtype, with static and symbolic extents. Data movement is
checked bit for bit."""

from __future__ import annotations

import itertools
import math

import numpy as np
import oracle
import pytest
from oracle import ALL_DTYPES, assert_matches, assert_same, define, execute, rng_for, run

import braze as bz

# NumPy warnings (overflow, invalid casts, empty means) must not leak out of braze.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

OPS_COVERED = frozenset({"permute", "reshape", "squeeze", "slice", "pad", "cat", "flip", "broadcast", "expand"})


def sample(dtype: bz.DType, shape: tuple[int, ...], *salt: object) -> np.ndarray:
    rng = rng_for("views", dtype.name, shape, *salt)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(-100 if dtype.kind == "i" else 0, 100, shape).astype(dtype.numpy)
    values = rng.uniform(-10, 10, shape)
    if values.size:
        values.reshape(-1)[0] = math.nan  # carried through bit for bit
    return values.astype(dtype.numpy)


# (id, input shape, braze function, NumPy function)
CASES = [
    ("permute", (2, 3, 4), lambda t: bz.ops.permute(t, (2, 0, 1)), lambda a: a.transpose(2, 0, 1)),
    ("permute_negative", (2, 3, 4), lambda t: bz.ops.permute(t, (-1, 0, 1)), lambda a: a.transpose(2, 0, 1)),
    ("permute_method", (2, 3, 4), lambda t: t.permute(1, 0, 2), lambda a: a.transpose(1, 0, 2)),
    ("transpose", (2, 3, 4), bz.ops.transpose, lambda a: np.swapaxes(a, -2, -1)),
    ("transpose_dims", (2, 3, 4), lambda t: bz.ops.transpose(t, 0, 2), lambda a: np.swapaxes(a, 0, 2)),
    ("T", (2, 3, 4), lambda t: t.T, lambda a: a.T),
    ("reshape", (2, 3, 4), lambda t: bz.ops.reshape(t, (6, 4)), lambda a: a.reshape(6, 4)),
    ("reshape_infer", (2, 3, 4), lambda t: bz.ops.reshape(t, (4, -1)), lambda a: a.reshape(4, -1)),
    ("reshape_flat", (2, 3, 4), lambda t: t.reshape(-1), lambda a: a.reshape(-1)),
    ("reshape_ones", (2, 3, 4), lambda t: t.reshape(1, 24, 1), lambda a: a.reshape(1, 24, 1)),
    ("reshape_method_tuple", (2, 3, 4), lambda t: t.reshape((3, 8)), lambda a: a.reshape(3, 8)),
    ("reshape_empty", (0, 3), lambda t: t.reshape(3, 0), lambda a: a.reshape(3, 0)),
    ("reshape_empty_infer", (0, 3), lambda t: t.reshape(-1, 3, 1), lambda a: a.reshape(-1, 3, 1)),
    ("reshape_0d", (1, 1), lambda t: t.reshape(()), lambda a: a.reshape(())),
    ("squeeze_all", (1, 3, 1), bz.ops.squeeze, np.squeeze),
    ("squeeze_axis", (1, 3, 1), lambda t: bz.ops.squeeze(t, 0), lambda a: np.squeeze(a, 0)),
    ("squeeze_negative", (1, 3, 1), lambda t: t.squeeze(-1), lambda a: np.squeeze(a, -1)),
    ("squeeze_list", (1, 3, 1), lambda t: bz.ops.squeeze(t, [0, 2]), lambda a: np.squeeze(a, (0, 2))),
    ("unsqueeze_front", (3, 4), lambda t: bz.ops.unsqueeze(t, 0), lambda a: a[None]),
    ("unsqueeze_middle", (3, 4), lambda t: t.unsqueeze(1), lambda a: a[:, None]),
    ("unsqueeze_back", (3, 4), lambda t: bz.ops.unsqueeze(t, -1), lambda a: a[..., None]),
    ("unsqueeze_negative", (3, 4), lambda t: bz.ops.unsqueeze(t, -3), lambda a: a[None]),
    ("slice", (5, 6), lambda t: bz.ops.slice(t, [slice(1, None), slice(None, None, -2)]), lambda a: a[1:, ::-2]),
    ("slice_tuples", (5, 6), lambda t: bz.ops.slice(t, [(4, 0, -1), (1, 5, 3)]), lambda a: a[4:0:-1, 1:5:3]),
    ("slice_leading", (5, 6), lambda t: bz.ops.slice(t, [slice(-2, None)]), lambda a: a[-2:]),
    ("getitem_mixed", (6, 7, 2), lambda t: t[1:5, ::-2, None, ...], lambda a: a[1:5, ::-2, None, ...]),
    ("getitem_int", (4, 5), lambda t: t[1], lambda a: a[1]),
    ("getitem_negative_int", (4, 5), lambda t: t[-1], lambda a: a[-1]),
    ("getitem_last_axis", (4, 5), lambda t: t[..., -2], lambda a: a[..., -2]),
    ("getitem_none", (4, 5), lambda t: t[None], lambda a: a[None]),
    ("getitem_none_inside", (4, 5), lambda t: t[:, None, 1:3], lambda a: a[:, None, 1:3]),
    ("getitem_trailing_none", (4, 5), lambda t: t[..., None], lambda a: a[..., None]),
    ("getitem_to_0d", (2, 3, 4), lambda t: t[-1, 0, 2], lambda a: a[-1, 0, 2]),
    ("getitem_ellipsis_middle", (2, 3, 4), lambda t: t[1, ..., ::-1], lambda a: a[1, ..., ::-1]),
    ("pad", (2, 3), lambda t: bz.ops.pad(t, [(1, 2), (0, 3)]), lambda a: np.pad(a, [(1, 2), (0, 3)])),
    ("pad_last_only", (2, 3), lambda t: bz.ops.pad(t, [(2, 1)], 1), lambda a: np.pad(a, [(0, 0), (2, 1)],
                                                                                     constant_values=1)),
    ("pad_empty", (0, 2), lambda t: bz.ops.pad(t, [(1, 0), (1, 1)]), lambda a: np.pad(a, [(1, 0), (1, 1)])),
    ("flip_all", (2, 3, 4), bz.ops.flip, np.flip),
    ("flip_axis", (2, 3, 4), lambda t: bz.ops.flip(t, 0), lambda a: np.flip(a, 0)),
    ("flip_axes", (2, 3, 4), lambda t: t.flip((0, -1)), lambda a: np.flip(a, (0, 2))),
    ("flip_dims_one_by_one", (2, 3, 4), lambda t: t.flip(0, -1), lambda a: np.flip(a, (0, 2))),
    ("flip_dims_keyword", (2, 3, 4), lambda t: t.flip(dims=[1]), lambda a: np.flip(a, 1)),
    ("broadcast", (3, 4), lambda t: bz.ops.broadcast(t, [True, False, True, False]), lambda a: a[None, :, None]),
    ("expand", (1, 3), lambda t: bz.ops.expand(t, (4, 3)), lambda a: np.broadcast_to(a, (4, 3))),
    ("expand_keep", (1, 3), lambda t: bz.ops.expand(t, (4, -1)), lambda a: np.broadcast_to(a, (4, 3))),
    ("expand_several", (2, 1, 1), lambda t: bz.ops.expand(t, (2, 5, 3)), lambda a: np.broadcast_to(a, (2, 5, 3))),
    ("broadcast_in_dim", (3,), lambda t: bz.ops.broadcast_in_dim(t, (2, 3), [1]),
     lambda a: np.broadcast_to(a, (2, 3))),
    ("broadcast_in_dim_inner", (3, 1), lambda t: bz.ops.broadcast_in_dim(t, (2, 3, 4), [1, 2]),
     lambda a: np.broadcast_to(a[None], (2, 3, 4))),
    ("broadcast_in_dim_0d", (), lambda t: bz.ops.broadcast_in_dim(t, (2, 2), []),
     lambda a: np.broadcast_to(a, (2, 2))),
    ("chain", (4, 6), lambda t: t.T[1:, ::2].reshape(-1)[None, :].flip(1),
     lambda a: np.flip(a.T[1:, ::2].reshape(-1)[None, :], 1)),
]


@pytest.mark.parametrize("static", [False, True], ids=["symbolic", "static"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_view(case, dtype, static):
    name, shape, bz_fn, np_fn = case
    x = sample(dtype, shape, name)
    (out,) = execute(lambda f: bz_fn(define(f, x, static)), [x])
    expected = np_fn(x)
    if name.startswith("pad"):  # np.pad's fill is the value converted to x's dtype
        expected = expected.astype(x.dtype)
    assert_same(out, expected, name)


# --- slices: every start, stop and step against Python's rules --------------------------------------
BOUNDS = [None, -7, -3, -1, 0, 1, 2, 4, 7]
STEPS = [1, 2, 3, -1, -2, -4]
TRIPLES = list(itertools.product(BOUNDS, BOUNDS, STEPS))
# Under BRAZE_OPS_BACKEND=nvrtc each slice is a copy task of one CUDA kernel: every 7th triple (each
# step, bounds on both sides of 0 and past the ends) gives NVRTC the same code to compile in a
# seventh of the time; the extents of every triple are checked on the host backends all the same.
NVRTC_TRIPLES = TRIPLES[::7]


@pytest.mark.parametrize("static", [False, True], ids=["symbolic", "static"])
@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_slice_extents_follow_python(n, static):
    x = np.arange(n, dtype=np.int32)
    triples = NVRTC_TRIPLES if oracle.BACKEND == "nvrtc" else TRIPLES
    with bz.Fusion() as f:
        t = f.define_tensor(shape=(n,) if static else (-1,), dtype=bz.int32)  # -1 even for n = 1
        for start, stop, step in triples:
            f.add_output(t[start:stop:step])
    outs = run(f, [x])
    for (start, stop, step), out in zip(triples, outs):
        np.testing.assert_array_equal(out, x[start:stop:step], err_msg=f"[{start}:{stop}:{step}] of {n}")
        assert out.shape == x[start:stop:step].shape


def test_slice_of_a_broadcast_dim_to_nothing_no_longer_broadcasts():
    x = np.ones((1, 4), np.float32)
    with bz.Fusion() as f:
        t = f.define_tensor(shape=(1, 4))
        y = f.define_tensor(shape=(-1, 4))
        empty = t[1:]
        f.add_output(empty + y)
    (out,) = run(f, [x, np.ones((0, 4), np.float32)])
    assert out.shape == (0, 4)
    with pytest.raises(bz.InputError):  # (0, 4) + (3, 4) does not broadcast
        run(f, [x, np.ones((3, 4), np.float32)])


# (slice of x, NumPy's slice): each keeps one element of a long enough dimension
ONE_ELEMENT_SLICES = [
    (lambda t: t[:, :1], lambda a: a[:, :1]),
    (lambda t: t[:, 2:3], lambda a: a[:, 2:3]),
    (lambda t: t[:, -1:], lambda a: a[:, -1:]),
    (lambda t: t[:, -2:-1], lambda a: a[:, -2:-1]),
    (lambda t: t[:, 1:4:3], lambda a: a[:, 1:4:3]),
]


@pytest.mark.parametrize("static", [False, True], ids=["symbolic", "static"])
@pytest.mark.parametrize("index", range(len(ONE_ELEMENT_SLICES)))
def test_one_element_slice_broadcasts_as_numpy(index, static):
    bz_slice, np_slice = ONE_ELEMENT_SLICES[index]
    x, y = sample(bz.float32, (3, 4), "x"), sample(bz.float32, (3, 5), "y")
    with bz.Fusion() as f:
        t, u = define(f, x, static), define(f, y, static)
        f.add_output(bz_slice(t) * u)
        f.add_output(bz.ops.expand(bz_slice(t), (3, 6)))
        f.add_output(bz_slice(t) + 1)  # used alone it is the slice as it is
    product, expanded, alone = run(f, [x, y])
    # (arithmetic on a GPU gives the canonical NaN, not the operand's payload: values, not bits)
    np.testing.assert_array_equal(product, np_slice(x) * y)
    assert_same(expanded, np.broadcast_to(np_slice(x), (3, 6)))
    np.testing.assert_array_equal(alone, np_slice(x) + 1)


def test_one_element_slice_of_too_short_a_dim():
    with bz.Fusion() as f:
        t, u = f.define_tensor((-1, -1), name="x"), f.define_tensor((-1, -1), name="y")
        f.add_output(t[:, 2:3] * u)
        f.add_output(t[:, 2:3] * 2)
    with pytest.raises(bz.InputError, match="one element of a slice, broadcast: got extents 0 and 1"):
        run(f, [np.ones((3, 2), np.float32), np.ones((3, 5), np.float32)])
    with bz.Fusion() as g:
        g.add_output(g.define_tensor((-1, -1))[:, 2:3] * 2)
    (alone,) = run(g, [np.ones((3, 2), np.float32)])
    assert alone.shape == (3, 0)


def test_pad_fill_converts_as_a_cast():
    x = np.array([1.0, 2.0], np.float16)
    (out,) = execute(lambda f: bz.ops.pad(define(f, x), [(1, 0)], 1e6), [x])
    assert_same(out, np.array([np.inf, 1.0, 2.0], np.float16))
    with bz.Fusion() as f:
        with pytest.raises(bz.FusionDefinitionError, match="pad.*nan"):
            bz.ops.pad(f.define_tensor(shape=(-1,), dtype=bz.int8), [(1, 1)], math.nan)


def test_pad_refuses_torchs_flat_widths_and_says_how_to_write_them():
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1))
        with pytest.raises(bz.FusionDefinitionError, match=r"pad: widths: expected \(before, after\) pairs, one per "
                                                           r"dimension from the first .* got \(1, 1\); torch's F.pad"):
            bz.ops.pad(x, (1, 1))


# --- cat --------------------------------------------------------------------------------------
CAT_CASES = [
    ([(2, 3), (4, 3)], 0, [bz.float32, bz.float32]),
    ([(2, 3), (2, 1), (2, 2)], 1, [bz.int8, bz.int8, bz.int8]),
    ([(2, 3), (2, 1), (2, 2)], -1, [bz.int8, bz.int32, bz.int8]),
    ([(3,), (2,)], 0, [bz.int32, bz.float16]),
    ([(3,), (0,), (2,)], 0, [bz.bool_, bz.int8, bz.bool_]),
    ([(2, 2), (1, 2)], 0, [bz.bfloat16, bz.float16]),
    ([(1, 2, 3), (1, 2, 3)], 1, [bz.float64, bz.bool_]),
]


@pytest.mark.parametrize("static", [False, True], ids=["symbolic", "static"])
@pytest.mark.parametrize("case", CAT_CASES, ids=str)
def test_cat(case, static):
    shapes, axis, dtypes = case
    xs = [sample(d, s, "cat", i) for i, (d, s) in enumerate(zip(dtypes, shapes))]
    (out,) = execute(lambda f: bz.ops.cat([define(f, x, static) for x in xs], axis), xs)
    result = dtypes[0]
    for d in dtypes[1:]:
        result = bz.dtypes.promote_types(result, d)
    expected = np.concatenate([x.astype(np.float64) for x in xs], axis).astype(result.numpy)
    assert_same(out, expected, f"cat {shapes}")


def test_cat_of_broadcast_axes_broadcasts():
    """An axis of extent 1 in every input stays one that broadcasts, as NumPy's concatenate gives it: the
    sum with a (3, 4) once raised InputError 'must match: got extents 1 and 3'."""
    with bz.Fusion() as f:
        x, y = f.define_tensor((1, -1)), f.define_tensor((-1, -1))
        f.add_output(bz.ops.cat([x, x * 2], 1) + y)
    x, y = np.array([[1.0, 2.0]], np.float32), np.arange(12, dtype=np.float32).reshape(3, 4)
    (out,) = f.execute([x, y], backend="llvm")
    np.testing.assert_array_equal(out, np.concatenate([x, x * 2], 1) + y)


# --- definition errors ------------------------------------------------------------------------
ERRORS = [
    ("permute", lambda t: bz.ops.permute(t, (0, 0, 1))),
    ("permute", lambda t: bz.ops.permute(t, (0, 1))),
    ("transpose", lambda t: bz.ops.transpose(t, 0, 3)),
    ("reshape", lambda t: bz.ops.reshape(t, (5, 5))),
    ("reshape", lambda t: bz.ops.reshape(t, (-1, -1))),
    ("reshape", lambda t: bz.ops.reshape(t, (0, -1))),
    ("squeeze", lambda t: bz.ops.squeeze(t, 1)),
    ("unsqueeze", lambda t: bz.ops.unsqueeze(t, 4)),
    ("slice", lambda t: bz.ops.slice(t, [slice(None, None, 0)])),
    ("slice", lambda t: bz.ops.slice(t, [slice(None)] * 4)),
    ("slice", lambda t: bz.ops.slice(t, [slice(0.5, None)])),
    ("slice: dimension 0: expected a slice", lambda t: bz.ops.slice(t, [0, 1])),  # nvFuser's starts alone
    ("slice: expected as many", lambda t: bz.ops.slice(t, [0, 1], [2])),
    ("slice: expected slices or start_indices", lambda t: bz.ops.slice(t, [0], start_indices=[0], end_indices=[1])),
    ("indexing", lambda t: t[..., 0, ...]),
    ("indexing", lambda t: t[0, 0, 0, 0]),
    ("index 5 of dimension 0", lambda t: t[5]),  # out of range: an int index selects no element
    ("pad", lambda t: bz.ops.pad(t, [(-1, 0)])),
    ("pad", lambda t: bz.ops.pad(t, [(0, 0)] * 4)),
    ("cat", lambda t: bz.ops.cat([])),
    ("cat", lambda t: bz.ops.cat([t, t[0]])),
    ("cat", lambda t: bz.ops.cat([t, t[:, :1]], 0)),
    ("flip", lambda t: bz.ops.flip(t, (0, 0))),
    ("expand", lambda t: bz.ops.expand(t, (2, 3, 5))),
    ("expand", lambda t: bz.ops.expand(t, (2, 3))),
    ("broadcast_in_dim", lambda t: bz.ops.broadcast_in_dim(t, (2, 3, 4, 5), [2, 1, 0])),
    ("broadcast", lambda t: bz.ops.broadcast(t, [True, False])),
]


@pytest.mark.parametrize("op,build", ERRORS, ids=[f"{op}-{i}" for i, (op, _) in enumerate(ERRORS)])
def test_definition_errors(op, build):
    with bz.Fusion() as f:
        t = f.define_tensor(shape=(2, 3, 4), name="x")
        with pytest.raises(bz.FusionDefinitionError, match=op):
            build(t)


@pytest.mark.parametrize("build,bad_shape", [
    (lambda t: bz.ops.reshape(t, (6, -1)), (5, 5)),  # 25 elements: no integer second extent
    (lambda t: bz.ops.reshape(t, (2, 3)), (3, 3)),
    (lambda t: bz.ops.squeeze(t, 0), (3, 2)),
    (lambda t: bz.ops.expand(t, (4, 2)), (3, 2)),
    (lambda t: bz.ops.cat([t, t.T], 0), (2, 3)),
])
def test_symbolic_extents_checked_at_execute(build, bad_shape):
    with bz.Fusion() as f:
        f.add_output(build(f.define_tensor(shape=(-1, -1), name="x")))
    with pytest.raises(bz.InputError):
        run(f, [np.zeros(bad_shape, np.float32)])


def test_nvfusers_slice_of_start_and_end_indices_and_strides():
    x = sample(bz.float32, (5, 6))
    outs = execute(lambda f: [bz.ops.slice(t := define(f, x), [0, 1], [4, 6], [1, 2]),
                              bz.ops.slice(t, start_indices=[-3], end_indices=[t.shape[0]])], [x])
    assert_same(outs[0], x[0:4, 1:6:2])
    assert_same(outs[1], x[-3:])


def test_torch_and_numpy_keyword_names_for_axes():
    x = sample(bz.float32, (2, 1, 3))
    outs = execute(lambda f: [bz.ops.cat([t := define(f, x), t], dim=2), bz.ops.squeeze(t, dim=1),
                              bz.ops.unsqueeze(t, dim=0), bz.ops.flip(t, dims=(0, 2)), t.squeeze(axis=1)], [x])
    expected = [np.concatenate([x, x], 2), x[:, 0], x[None], x[::-1, :, ::-1], x[:, 0]]
    for out, want in zip(outs, expected, strict=True):
        assert_same(out, want)
    with bz.Fusion() as f:
        with pytest.raises(bz.FusionDefinitionError, match="axis= and dim="):
            bz.ops.cat([define(f, x)], axis=0, dim=0)


def test_sizes_given_as_nvfusers_scalars_constant_or_extent():
    x, b = sample(bz.float32, (4, 6)), sample(bz.float32, (6,))

    def build(f):
        t, v = define(f, x), define(f, b)
        four, one = f.define_scalar(4, dtype=bz.int64), f.define_scalar(1, dtype=bz.int64)
        return [bz.ops.reshape(t, [t.size(1), four]),
                t + bz.ops.broadcast_in_dim(v, shape=[four, t.size(1)], broadcast_dims=[1]),
                bz.ops.full([four, 2], 1.5, dtype=bz.float32),
                bz.ops.slice(t, [0, one], [four, t.size(1)]),
                bz.ops.pad(t, [(0, 0), (one, 2)]),
                bz.ops.expand(bz.ops.reshape(t, [4, 6, 1]), [4, 6, f.define_scalar(3, dtype=bz.int64)])]

    outs = execute(build, [x, b])
    expected = [x.reshape(6, 4), x + b, np.full((4, 2), 1.5, np.float32), x[:, 1:],
                np.pad(x, [(0, 0), (1, 2)]), np.broadcast_to(x[:, :, None], (4, 6, 3))]
    assert_matches(outs[1], expected[1], bz.float32)  # arithmetic: a NaN's payload is the device's
    for out, want in zip(outs[:1] + outs[2:], expected[:1] + expected[2:], strict=True):
        assert_same(out, want)
    with bz.Fusion() as f:  # a float scalar input sizes nothing (integers do: test_nvfuser_dynamic_sizes.py)
        t, n = define(f, x), f.define_scalar(dtype=bz.float32)
        with pytest.raises(bz.FusionDefinitionError, match=r"reshape: shape\[0\]: expected an integer scalar"):
            bz.ops.reshape(t, [n, -1])


def test_a_definition_written_for_nvfuser_reads_as_it_is():
    x = sample(bz.float32, (2, 8, 4, 16))
    with bz.Fusion() as fd:
        t0 = fd.define_tensor(shape=[-1, -1, -1, -1], contiguity=[True] * 4, dtype=bz.DataType.Float,
                              is_cpu=False, stride_order=[3, 2, 1, 0])
        t1 = fd.ops.permute(t0, dims=[0, 2, 1, 3])
        half = fd.ops.slice(t1, start_indices=[0, 0, 0, 8], end_indices=[2, 4, 8, 16], strides=[1, 1, 1, 1])
        fd.add_output(fd.ops.cast(fd.ops.cat([fd.ops.neg(half), t1[..., :8]], dim=-1), dtype=bz.DataType.BFloat16))
        var, mean = fd.ops.var_mean(t0, dims=[3], correction=0, keepdim=False)
        fd.add_output(fd.ops.sub(t0, fd.ops.broadcast_in_dim(mean, shape=[2, 8, 4, 1], broadcast_dims=[0, 1, 2])))
        fd.add_output(fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-5))))
    rope, centred, rstd = fd.execute([x])
    moved = x.transpose(0, 2, 1, 3)
    assert rope.dtype == bz.bfloat16.numpy
    np.testing.assert_allclose(rope.astype(np.float64), np.concatenate([-moved[..., 8:], moved[..., :8]], -1),
                               rtol=1e-2)
    np.testing.assert_allclose(centred, x - x.mean(3, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(rstd, 1 / np.sqrt(x.var(3) + 1e-5), rtol=1e-5)
    with bz.Fusion() as fd, pytest.raises(bz.FusionDefinitionError, match="is_cpu=True"):
        fd.define_tensor(shape=[], is_cpu=True)
