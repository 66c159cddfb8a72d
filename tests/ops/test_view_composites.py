"""The views model code writes (`braze/ops/view_composites.py`: split, chunk, unbind, stack, repeat,
tile, repeat_interleave, roll, tril, triu, narrow, flatten, unflatten, masked_fill) and their torch-style method
spellings, against NumPy in float64 on shapes with extents 1 and odd ones, static and symbolic; their
argument errors; and torch's `x.max(dim=)` next to NumPy's `x.max(axis)`."""

from __future__ import annotations

import model_views
import numpy as np
import oracle
import pytest
from oracle import assert_matches, assert_same, define, execute, rng_for, run

import braze as bz
from braze import engine
from braze.codegen.cuda import with_prelude
from braze.compile import nvrtc

# Compositions of slices, cat, broadcast and where: the op suite's NVRTC pass compiles their parts
# already (and test_the_cuda_of_an_attention_shaped_fusion_compiles runs in the reference pass).
pytestmark = pytest.mark.skipif(oracle.BACKEND == "nvrtc", reason="their parts' CUDA is compiled by the op tests")

# The public names of bz.ops this module tests (tests/ops/test_coverage.py): no op table entry of their own.
COMPOSITES_COVERED = frozenset({"split", "chunk", "unbind", "stack", "repeat", "tile", "repeat_interleave", "roll",
                                "tril", "triu", "narrow", "flatten", "unflatten",
                                "masked_fill", "take_along_axis", "take"})
SHAPES = [(1, 1), (1, 5), (4, 1), (3, 5), (6, 4)]


def torch_split(a: np.ndarray, size: int, axis: int) -> list[np.ndarray]:
    """torch's `split` with an int: pieces of `size`, the last smaller, one (empty) piece of nothing."""
    n = a.shape[axis]
    starts = range(0, n, size) if n else [0]
    return [np.take(a, range(s, min(s + size, n)), axis) for s in starts]


def torch_chunk(a: np.ndarray, chunks: int, axis: int) -> list[np.ndarray]:
    n = a.shape[axis]
    return torch_split(a, -(-n // chunks), axis) if n else [a] * chunks


def _sections(n: int) -> list[int]:
    """A list of sizes adding up to n, with an empty piece."""
    return [n // 2, 0, n - n // 2]


# (id, braze function of (x, shape), NumPy function, needs static extents); x is 2-D.
CASES = [
    ("split_int", lambda t, s: t.split(2, dim=1), lambda a: torch_split(a, 2, 1), True),
    ("split_int_axis0", lambda t, s: bz.ops.split(t, 3), lambda a: torch_split(a, 3, 0), True),
    ("split_list", lambda t, s: bz.ops.split(t, _sections(s[1]), axis=-1),
     lambda a: np.split(a, np.cumsum(_sections(a.shape[1]))[:-1], 1), False),
    ("chunk", lambda t, s: t.chunk(2, dim=0), lambda a: torch_chunk(a, 2, 0), True),
    ("chunk_one", lambda t, s: bz.ops.chunk(t, 1, -1), lambda a: [a], False),
    ("unbind", lambda t, s: t.unbind(dim=-1), lambda a: list(np.moveaxis(a, -1, 0)), True),
    ("stack", lambda t, s: bz.ops.stack([t, t * 2, -t], 1), lambda a: np.stack([a, a * 2, -a], 1), False),
    ("stack_last", lambda t, s: bz.ops.stack((t, t + 1), dim=-1), lambda a: np.stack([a, a + 1], -1), False),
    ("repeat", lambda t, s: t.repeat(2, 3), lambda a: np.tile(a, (2, 3)), False),
    ("repeat_leading", lambda t, s: t.repeat((2, 1, 3)), lambda a: np.tile(a, (2, 1, 3)), False),
    ("repeat_zero", lambda t, s: bz.ops.repeat(t, (1, 0)), lambda a: np.tile(a, (1, 0)), False),
    ("tile_short", lambda t, s: bz.ops.tile(t, 3), lambda a: np.tile(a, 3), False),
    ("tile_method", lambda t, s: t.tile(2, 1, 1), lambda a: np.tile(a, (2, 1, 1)), False),
    ("repeat_interleave", lambda t, s: t.repeat_interleave(3, dim=0), lambda a: np.repeat(a, 3, 0), False),
    ("repeat_interleave_flat", lambda t, s: bz.ops.repeat_interleave(t, 2), lambda a: np.repeat(a, 2), False),
    ("roll", lambda t, s: t.roll(2, 1), lambda a: np.roll(a, 2, 1), False),
    ("roll_negative", lambda t, s: bz.ops.roll(t, -7, axis=0), lambda a: np.roll(a, -7, 0), False),
    ("roll_two", lambda t, s: t.roll((1, -1), dims=(0, 1)), lambda a: np.roll(a, (1, -1), (0, 1)), False),
    ("roll_flat", lambda t, s: bz.ops.roll(t, 3), lambda a: np.roll(a, 3), False),
    ("tril", lambda t, s: t.tril(), np.tril, False),
    ("tril_above", lambda t, s: bz.ops.tril(t, 1), lambda a: np.tril(a, 1), False),
    ("triu_below", lambda t, s: t.triu(diagonal=-1), lambda a: np.triu(a, -1), False),
    ("triu_3d", lambda t, s: bz.ops.triu(bz.ops.stack([t, -t]), 2), lambda a: np.triu(np.stack([a, -a]), 2), False),
    ("narrow", lambda t, s: t.narrow(1, 0, 1), lambda a: a[:, :1], False),
    ("narrow_negative", lambda t, s: bz.ops.narrow(t, 0, -1, 1), lambda a: a[-1:], False),
    ("flatten", lambda t, s: bz.ops.flatten(bz.ops.stack([t, t]), 1), lambda a: np.stack([a, a]).reshape(2, -1),
     False),
    ("unflatten_pairs", lambda t, s: bz.ops.stack([t, -t], -1).flatten(-2).unflatten(-1, (-1, 2)),
     lambda a: np.stack([a, -a], -1), False),
    ("unflatten_leading", lambda t, s: bz.ops.unflatten(bz.ops.stack([t, t, t]).flatten(0, 1), 0, [3, s[0]]),
     lambda a: np.stack([a, a, a]), False),
    ("masked_fill", lambda t, s: bz.ops.masked_fill(t, t > 0, -1.5), lambda a: np.where(a > 0, -1.5, a), False),
    ("mT", lambda t, s: bz.ops.stack([t, t]).mT, lambda a: np.stack([a, a]).transpose(0, 2, 1), False),
    ("as", lambda t, s: t.reshape(-1).view_as(t).reshape_as(t) + t[:1].expand_as(t),
     lambda a: a + np.broadcast_to(a[:1], a.shape), False),
]


def _listed(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


# Pieces of a fixed size over a symbolic extent are refused (test_symbolic_extent_errors): static only.
RUNS = [pytest.param(case, shape, static, id=f"{case[0]}-{shape}-{'static' if static else 'symbolic'}")
        for case in CASES for shape in SHAPES for static in (False, True)
        if static or not case[3] or all(n == 1 for n in shape)]


@pytest.mark.parametrize("case, shape, static", RUNS)
def test_view_composite(case, shape, static):
    name, bz_fn, np_fn, _ = case
    x = rng_for("view_composites", name, shape).uniform(-5, 5, shape)
    outs = execute(lambda f: _listed(bz_fn(define(f, x, static), shape)), [x])
    expected = _listed(np_fn(x))
    assert len(outs) == len(expected), name
    for out, want in zip(outs, expected):
        assert_same(out, want, name)


def test_every_dtype_moves_bit_for_bit():
    values = {np.bool_: [True, False, True], np.int8: [-3, 7, 1], np.float16: [np.nan, -0.0, 2.5]}

    def build(f: bz.Fusion, x: np.ndarray) -> list:
        t = define(f, x)
        return [t.tril(), t.roll(1, 1), bz.ops.stack([t, t], -1), t.repeat(2, 1), t.repeat_interleave(2, 1),
                *t.chunk(2, dim=1)]

    for dtype, row in values.items():
        x = np.array([row, row[::-1]], dtype)
        outs = execute(lambda f, x=x: build(f, x), [x])
        expected = [np.tril(x), np.roll(x, 1, 1), np.stack([x, x], -1), np.tile(x, (2, 1)), np.repeat(x, 2, 1),
                    x[:, :2], x[:, 2:]]
        for out, want in zip(outs, expected, strict=True):
            assert_same(out, want, str(dtype))


# (id, braze function of (x, ids), NumPy function); ids are int64 in [-n, n) along the axis, n the extent.
TAKES = [
    ("target_a_row", lambda t, i: bz.ops.take_along_axis(t, i[:, :1], 1),
     lambda a, i: np.take_along_axis(a, i[:, :1], 1)),
    ("three_a_row", lambda t, i: bz.ops.take_along_axis(t, i[:, :3], -1),
     lambda a, i: np.take_along_axis(a, i[:, :3], -1)),
    ("a_column", lambda t, i: bz.ops.take_along_axis(t, i[:1], 0), lambda a, i: np.take_along_axis(a, i[:1], 0)),
    ("broadcast_indices", lambda t, i: bz.ops.take_along_axis(t, i[:1, :2], 1),
     lambda a, i: np.take_along_axis(a, i[:1, :2], 1)),
    ("gather", lambda t, i: t.gather(1, i[:, :2]), lambda a, i: np.take_along_axis(a, i[:, :2], 1)),
    ("with_a_loss", lambda t, i: -bz.ops.take_along_axis(bz.ops.log_softmax(t, 1), i[:, :1], 1).mean(),
     lambda a, i: -np.take_along_axis(a - np.log(np.exp(a).sum(1, keepdims=True)), i[:, :1], 1).mean()),
]


@pytest.mark.parametrize("shape", [(1, 3), (4, 5), (7, 3), (3, 130)], ids=str)
@pytest.mark.parametrize("case", TAKES, ids=[c[0] for c in TAKES])
def test_take_along_axis_picks_numpys_elements(case, shape):
    """Negative indices count from the end; signed zeros and NaN come through as they are. The loss
    rounds (exp, log, a mean) on each backend in its own way: it takes finite logits and is compared
    within float64's tolerance."""
    name, bz_fn, np_fn = case
    rng = rng_for("take_along_axis", name, shape)
    x = rng.uniform(-5, 5, shape)
    if name != "with_a_loss":
        x.flat[:3] = [-0.0, np.nan, np.inf][:x.size]
    axis = 0 if name == "a_column" else 1
    ids = rng.integers(-shape[axis], shape[axis], (shape[0], max(shape[1], 3)))[:, :shape[1]]
    ids = np.concatenate([ids, ids], 1) if ids.shape[1] < 3 else ids
    outs = execute(lambda f: bz_fn(define(f, x), define(f, ids)), [x, ids])
    with np.errstate(invalid="ignore"):
        expected = np_fn(x, ids)
    if name == "with_a_loss":
        assert_matches(outs[0], expected, bz.float64, k=8, what=name)
    else:
        assert_same(outs[0], expected, name)


@pytest.mark.parametrize("axis", [0, 1, -1, None], ids=str)
@pytest.mark.parametrize("index_shape", [(1,), (4,), (2, 3)], ids=str)
def test_take_picks_numpys_elements(axis, index_shape):
    """NumPy's np.take: the index's axes in place of `axis` (from the flattened x with axis=None); negative
    indices count from the end; signed zeros and NaN come through as they are."""
    rng = rng_for("take", str(axis), str(index_shape))
    x = rng.uniform(-5, 5, (3, 5))
    x.flat[:3] = [-0.0, np.nan, np.inf]
    n = x.size if axis is None else x.shape[axis]
    ids = rng.integers(-n, n, index_shape)
    outs = execute(lambda f: bz.ops.take(define(f, x), define(f, ids), axis), [x, ids])
    assert_same(outs[0], np.take(x, ids, axis))


def test_take_along_axis_fills_an_index_out_of_range_as_jax():
    x = np.array([[1.5, -2.0], [3.0, 4.0]])
    ids = np.array([[2], [-3]])
    for dtype, fill in [(np.float32, np.nan), (np.int16, -(2**15)), (np.uint8, 255), (np.bool_, True)]:
        (out,) = execute(lambda f, dtype=dtype: bz.ops.take_along_axis(define(f, x.astype(dtype)), define(f, ids), 1),
                         [x.astype(dtype), ids])
        assert_same(out, np.full((2, 1), fill, dtype), str(dtype))


@pytest.mark.parametrize("build, message", [
    (lambda t, i: bz.ops.take_along_axis(t, t, 1), r"take_along_axis: indices: expected an integer tensor"),
    (lambda t, i: bz.ops.take_along_axis(t, i[0], 1), r"take_along_axis: indices: expected rank 2"),
    (lambda t, i: bz.ops.take_along_axis(t, i[:, :2], 0),
     r"dimension 1 of x .* must match or be 1: got extents 3 and 2"),
], ids=["float_indices", "rank", "extents"])
def test_take_along_axis_names_a_bad_argument(build, message):
    with bz.Fusion() as f:
        t, i = f.define_tensor(shape=(4, 3), name="x"), f.define_tensor(shape=(4, 3), dtype=bz.int64, name="i")
        with pytest.raises(bz.FusionDefinitionError, match=message):
            build(t, i)


def test_stack_promotes_as_cat():
    x, y = np.arange(3, dtype=np.int8), np.linspace(0, 1, 3, dtype=np.float32)
    (out,) = execute(lambda f: bz.ops.stack([define(f, x), define(f, y)]), [x, y])
    assert_same(out, np.stack([x, y]).astype(np.float32))


@pytest.mark.parametrize("n", [0, 1, 5, 6, 7])
def test_chunk_of_a_symbolic_extent_gives_torchs_pieces_or_refuses(n):
    """Over a symbolic extent chunk gives `chunks` pieces; an extent where torch gives fewer is refused."""
    with bz.Fusion() as f:
        pieces = f.define_tensor(shape=(-1,), dtype=bz.float64, name="x").chunk(3)
        for piece in pieces:
            f.add_output(piece)
    x = np.arange(n, dtype=np.float64)
    expected = torch_chunk(x, 3, 0)
    if len(expected) != 3:
        with pytest.raises(bz.InputError, match="chunk: dimension 0 of .* into 3 pieces"):
            run(f, [x])
        return
    for out, want in zip(run(f, [x]), expected, strict=True):
        assert_same(out, want)


@pytest.mark.parametrize("n, start, length", [(5, 1, 4), (5, -2, 2), (5, 3, 3), (2, -3, 1)])
def test_narrow_of_a_symbolic_extent_is_checked_at_run_time(n, start, length):
    with bz.Fusion() as f:
        f.add_output(f.define_tensor(shape=(-1,), dtype=bz.float64, name="x").narrow(0, start, length))
    x = np.arange(n, dtype=np.float64)
    first = n + start if start < 0 else start
    if first < 0 or first + length > n:
        with pytest.raises(bz.InputError, match="narrow: start .* must lie inside it"):
            run(f, [x])
    else:
        assert_same(run(f, [x])[0], x[first:first + length])


def test_max_and_min_with_dim_return_values_and_indices():
    x = rng_for("max_dim").integers(-3, 3, (4, 5)).astype(np.float64)  # ties: the first index, as torch
    outs = execute(lambda f: [*(t := define(f, x)).max(dim=1), t.min(dim=-2, keepdims=True).indices,
                              t.max(1), t.max(axis=0), t.min(0, keepdim=True)], [x])
    expected = [x.max(1), x.argmax(1), x.argmin(0)[None], x.max(1), x.max(0), x.min(0, keepdims=True)]
    for out, want in zip(outs, expected, strict=True):
        assert_same(out, want)
    with bz.Fusion() as f:
        pair = define(f, x).max(dim=0)
        assert pair._fields == ("values", "indices") and pair.indices.dtype == bz.int64


ERRORS = [
    (lambda t: bz.ops.split(t, 0, 1), r"split: split_size_or_sections: expected a positive int, got 0"),
    (lambda t: bz.ops.split(t, [2, 2], 2), r"split: split_size_or_sections: expected sizes that add up to the "
                                           r"extent 3 of dimension 2 of T0 \('x'\), got \[2, 2\] \(sum 4\)"),
    (lambda t: t.split([1, -1, 3], dim=1), r"split_size_or_sections\[1\]: expected a non-negative int, got -1"),
    (lambda t: t.split(1, dim=3), r"split axis: expected an axis in \[-3, 3\), got 3"),
    (lambda t: t.chunk(0), r"chunk: chunks: expected a positive int, got 0"),
    (lambda t: t.chunk(2.0), r"chunk: chunks: expected an int, got float 2.0"),
    (lambda t: bz.ops.unbind(t, -4), r"unbind axis: expected an axis in \[-3, 3\), got -4"),
    (lambda t: bz.ops.stack([]), r"stack: tensors: expected a non-empty list"),
    (lambda t: bz.ops.stack([t, t[0]]), r"stack: tensors: expected tensors of one rank, got ranks \[3, 2\]"),
    (lambda t: bz.ops.stack([t, t], 4), r"stack axis: expected an axis in \[-4, 4\), got 4"),
    (lambda t: bz.ops.stack([t, t[:, :1]]), (r"stack: dimension 1 of tensors\[0\] T0 \('x'\) "
                                            r"and tensors\[1\] T\d+ must match: got extents 2 and 1")),
    (lambda t: t.repeat(2, 2), r"repeat: sizes: expected at least 3 sizes for T0 \('x'\) of rank 3, got 2"),
    (lambda t: t.repeat(1, -1, 1), r"repeat: sizes\[1\]: expected a non-negative int, got -1"),
    (lambda t: bz.ops.tile(t, "2"), r"tile: sizes: expected a sequence of ints, got '2'"),
    (lambda t: t.repeat_interleave(-2), r"repeat_interleave: repeats: expected a non-negative int, got -2"),
    (lambda t: t.repeat_interleave(2, dim=5), r"repeat_interleave axis: expected an axis in \[-3, 3\), got 5"),
    (lambda t: t.roll((1, 2), 0), r"roll: expected as many shifts as axes, got shifts \(1, 2\) and axes 0"),
    (lambda t: t.roll((1, 2)), r"roll: shifts: expected one shift when no axis is given"),
    (lambda t: t.roll(1.5, 0), r"roll: shifts\[0\]: expected an int, got float 1.5"),
    (lambda t: t[0, 0].tril(), r"tril: expected a tensor of rank >= 2, got .* of rank 1"),
    (lambda t: t.triu(0.5), r"triu: diagonal: expected an int, got float 0.5"),
    (lambda t: t.narrow(1, 1, 2), r"narrow: start, length: expected a range inside dimension 1 of T0 \('x'\) "
                                  r"\(extent 2\), got start 1 and length 2"),
    (lambda t: t.narrow(0, 0, -1), r"narrow: length: expected a non-negative int, got -1"),
    (lambda t: t[0, 0].mT, r"mT: expected a tensor of rank >= 2"),
    (lambda t: t.view_as(3), r"view_as: expected a TensorView, got int"),
    (lambda t: t.max(dim=(0, 1)), r"max: dim: expected one int axis .* got dim=\(0, 1\); axis= reduces over several"),
    (lambda t: t.min(0, dim=1), r"min: dim: expected one int axis"),
]


@pytest.mark.parametrize("build, message", ERRORS, ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(ERRORS)])
def test_bad_arguments_name_the_argument_expected_and_actual(build, message):
    with bz.Fusion() as f:
        t = f.define_tensor(shape=(4, 2, 3), name="x")
        with pytest.raises(bz.FusionDefinitionError, match=message):
            build(t)


@pytest.mark.parametrize("build, message", [
    (lambda t: t.split(2, dim=1), r"split: dimension 1 of T0 \('x'\): expected an extent known when the fusion "
                                  r"is defined \(the number of pieces of a fixed size depends on it"),
    (lambda t: t.unbind(0), r"unbind: dimension 0 of .*: expected an extent known .* \(it is the number of slices\)"),
])
def test_symbolic_extent_errors(build, message):
    with bz.Fusion() as f:
        t = f.define_tensor(shape=(-1, -1), name="x")
        with pytest.raises(bz.FusionDefinitionError, match=message):
            build(t)


def test_split_list_of_a_symbolic_extent_is_checked_at_run_time():
    with bz.Fusion() as f:
        for piece in f.define_tensor(shape=(-1,), dtype=bz.float64, name="x").split([2, 3]):
            f.add_output(piece)
    x = np.arange(5.0)
    assert_same(run(f, [x])[1], x[2:])
    with pytest.raises(bz.InputError, match=r"split: sizes \[2, 3\] of dimension 0 of .* must add up"):
        run(f, [np.arange(6.0)])


def test_two_positional_ints_keep_the_loop_domain_split():
    with bz.Fusion() as f:
        t = f.define_tensor(shape=(8, -1), name="x")
        assert t.split(1, 4) is t and len(t.loop) == 3  # the schedule transform of braze/ir/tensor.py
        assert len(t.split(4, dim=0)) == 2 and len(t.split([3, 5])) == 2 and len(t.split(3)) == 3
        with pytest.raises(TypeError, match="unbind"):
            a, b = t  # noqa: F841  (iterating names the ops that give pieces)


@pytest.mark.parametrize("tokens", [1, 5, 8])
def test_an_attention_shaped_fusion_on_the_cpu_backend(tokens):
    """tests/model_views.py compiled for the CPU (llvm), one compile for every extent, against NumPy."""
    with bz.Fusion() as f:
        model_views.build(f)
    arrays = model_views.inputs(tokens)
    outs = f.execute(arrays, backend="llvm")
    for i, (out, want) in enumerate(zip(outs, model_views.reference(*arrays), strict=True)):
        np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-13, err_msg=f"output {i}")
        assert out.shape == want.shape


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_the_cuda_of_an_attention_shaped_fusion_compiles():
    with bz.Fusion() as f:
        model_views.build(f, bz.float16)
    source = engine.cuda_source(f, [a.astype(np.float16) for a in model_views.inputs(5)])
    nvrtc.compile_ptx(with_prelude(source.body), "model_views", "sm_90", ("-G",))
