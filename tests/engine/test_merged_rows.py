"""Pointwise tasks whose rows span several trailing axes (braze/schedule/rows.py), run on the llvm
backend and the reference against NumPy in float64: per-channel and per-(n, group) broadcasts,
inputs that are transposed or sliced views (no merge), extents of 0 and 1, new extents for one
compiled kernel (rows of H * W evaluated at run time); and random pointwise programs with broadcasts on
random axes and random input layouts, whose CUDA NVRTC compiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze as bz
from braze import config, engine
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import build_fusion, reference
from braze.codegen.cuda import with_prelude
from braze.compile import nvrtc

BACKENDS = ["llvm", "reference"]


def fusion(build, shapes) -> bz.Fusion:
    """Inputs of float64 with symbolic extents (1 where `shapes` says 1: broadcast)."""
    with bz.Fusion(name="rows") as f:
        ins = [f.define_tensor([1 if n == 1 else -1 for n in s], dtype=bz.float64) for s in shapes]
        for out in build(*ins):
            f.add_output(out)
    return f


def row_axes(f: bz.Fusion, arrays, gpu: bool) -> list[int]:
    key = engine.signature(f, engine.bind_inputs(f, arrays))
    plan, _, _ = engine.plan_kernel(f, key, views_on_host=not gpu, gpu=gpu)
    return [h.row_axes for h in plan.heuristics]


def run(f: bz.Fusion, arrays, backend: str) -> list[np.ndarray]:
    with config.scope(enable="poison_outputs"):
        return [np.asarray(o) for o in f.execute(arrays, backend=backend)]


def gpu_plan_on_cpu(f: bz.Fusion, arrays) -> list[np.ndarray]:
    """The Kernel IR planned for a GPU (pointwise normalizations reading written statistics), compiled
    for the CPU."""
    bound = engine.bind_inputs(f, arrays)
    key = engine.signature(f, bound)
    with config.scope(enable="poison_outputs"):
        return [np.asarray(o) for o in engine.compile_fusion(f, key, engine.lower_fusion(f, key, 0)).run(bound)]


def per_channel(x, m, s):
    return [(x - m[:, None, None]) * s[:, None, None] + 1.0]


def per_channel_numpy(x, m, s):
    return [(x - m[:, None, None]) * s[:, None, None] + 1.0]


def per_group(x, m, w):
    grouped = bz.ops.reshape(x, [x.shape[0], 2, -1])
    return [bz.ops.reshape(grouped - m, x.shape) * w[:, None, None]]


def per_group_numpy(x, m, w):
    grouped = x.reshape(x.shape[0], 2, -1)
    return [(grouped - m).reshape(x.shape) * w[:, None, None]]


def channel_inputs(rng, x):
    c = x.shape[1]
    return [x, rng.standard_normal(c), rng.standard_normal(c)]


def group_inputs(rng, x):
    return [x, rng.standard_normal((x.shape[0], 2, 1)), rng.standard_normal(x.shape[1])]


PATTERNS = {"per_channel": (per_channel, per_channel_numpy, channel_inputs, [(4,), (3,), (3,)]),
            "per_group": (per_group, per_group_numpy, group_inputs, [(4,), (2, 2, 1), (4,)])}


def x_of(rng, shape, layout: str) -> np.ndarray:
    """x of `shape`: contiguous, a transposed view (H and W swapped), or a slice of a wider tensor."""
    if layout == "transposed":
        return rng.standard_normal(shape[:2] + shape[:1:-1]).transpose(0, 1, 3, 2)
    if layout == "sliced":
        return rng.standard_normal(shape[:3] + (shape[3] * 2 + 1,))[..., 1::2]
    return rng.standard_normal(shape)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("layout, merged", [("contiguous", True), ("transposed", False), ("sliced", False)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_patterns_match_numpy(pattern, layout, merged, backend):
    build, numpy_rule, make, _ = PATTERNS[pattern]
    rng = np.random.default_rng(0)
    shape = (2, 4, 5, 7)
    f = fusion(build, [(-1,) * 4] + PATTERNS[pattern][3][1:])
    arrays = make(rng, x_of(rng, shape, layout))
    if layout != "transposed":  # a transposed read takes tiles; rows of one axis otherwise
        assert row_axes(f, arrays, gpu=True) == row_axes(f, arrays, gpu=False) == [2 if merged else 1]
    for got, want in zip(run(f, arrays, backend), numpy_rule(*arrays)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("shape", [(2, 4, 1, 7), (2, 4, 5, 1), (2, 4, 1, 1), (1, 4, 3, 3), (2, 4, 0, 7),
                                   (0, 4, 3, 3), (2, 4, 3, 0)])
def test_extents_of_zero_and_one_reuse_the_compiled_kernel(pattern, shape):
    if pattern == "per_group" and shape[0] == 0:
        pytest.skip("a reshape's -1 extent over zero elements has no value")
    build, numpy_rule, make, _ = PATTERNS[pattern]
    f = fusion(build, [(-1,) * 4] + PATTERNS[pattern][3][1:])
    rng = np.random.default_rng(1)
    for s in [(3, 4, 5, 6), shape]:  # one signature: rows of H * W read at run time
        arrays = make(rng, rng.standard_normal(s))
        for got, want in zip(run(f, arrays, "llvm"), numpy_rule(*arrays)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, channel_rows", [("batch_norm", False), ("batch_norm", True), ("group_norm", False)])
@pytest.mark.parametrize("shape", [(2, 64, 3, 5), (3, 64, 7, 9), (2, 64, 1, 1), (2, 64, 8, 8)])
def test_group_norm_and_batch_norm_planned_for_a_gpu_run_on_the_cpu(name, channel_rows, shape):
    """The GPU's plans compiled for the CPU, at odd H * W and extents of 1: a pointwise normalization
    reading the statistics earlier tasks wrote, its rows of H * W; or, for batch_norm's channels short
    enough (schedule.CHANNEL_ROW_LIMIT), a task a channel, its row N x H x W."""
    case = next(c for c in CASES if c.name == name)
    f = build_fusion(case, shape)
    arrays = case.inputs(np.random.default_rng(2), shape, np.float32)
    with config.scope(disable="" if channel_rows else "channel_rows"):
        assert max(row_axes(f, arrays, gpu=True)) == (3 if channel_rows else 2)
        results = gpu_plan_on_cpu(f, arrays)
    for got, want in zip(results, reference(case, arrays, None)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


VIEWS = {
    # x wider along W than the rows: a slice's start 0 and step 1 index it by the row's own indices.
    "slice_w": (lambda x: bz.ops.slice(x, [slice(None)] * 3 + [slice(0, -2)]), lambda x: x[..., :-2], 2),
    "slice_h": (lambda x: bz.ops.slice(x, [slice(None)] * 2 + [slice(0, -1), slice(None)]), lambda x: x[:, :, :-1], 0),
    "pad_w": (lambda x: bz.ops.pad(x, [(0, 0)] * 3 + [(0, 2)]), lambda x: np.pad(x, [(0, 0)] * 3 + [(0, 2)]), -2),
    "cat_w": (lambda x: bz.ops.cat([x, x], 3), lambda x: np.concatenate([x, x], 3), -7),
    "flip_hw": (lambda x: bz.ops.flip(x, [2, 3]), lambda x: x[:, :, ::-1, ::-1], 0),
}


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_views_inside_rows_of_several_axes(view, backend):
    """Rows over H and W of a view of x whose extents differ from x's: its reads keep their indices."""
    braze_view, numpy_view, widen = VIEWS[view]
    f = fusion(lambda x, m, s: per_channel(braze_view(x), m, s), [(-1,) * 4, (3,), (3,)])
    rng = np.random.default_rng(4)
    arrays = channel_inputs(rng, rng.standard_normal((2, 3, 5, 9 + widen)))
    assert row_axes(f, arrays, gpu=True) == [2]
    (got,) = run(f, arrays, backend)
    np.testing.assert_allclose(got, per_channel_numpy(numpy_view(arrays[0]), *arrays[1:])[0], rtol=1e-12)


# --- random pointwise programs ------------------------------------------------------------------
OPS = ["add", "sub", "mul", "maximum"]
LAYOUTS = ["contiguous", "contiguous", "transposed", "sliced", "offset"]  # contiguous twice as likely


@st.composite
def programs(draw):
    """(rank, x's shape, per input: which axes it varies along, its layout; the ops joining them)."""
    rank = draw(st.integers(3, 5))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 5]), min_size=rank, max_size=rank)))
    count = draw(st.integers(1, 3))
    # Statistics over leading axes (broadcast along the rest, as batch_norm's are), or any axes.
    prefix = st.integers(0, rank).map(lambda cut: tuple(axis < cut for axis in range(rank)))
    varies = [draw(prefix | st.lists(st.booleans(), min_size=rank, max_size=rank).map(tuple)) for _ in range(count)]
    layouts = [draw(st.sampled_from(LAYOUTS)) for _ in range(count + 1)]
    ops = [draw(st.sampled_from(OPS)) for _ in range(count)]
    return rank, shape, varies, layouts, ops


def laid_out(rng, shape, layout: str) -> np.ndarray:
    """Values of `shape` in `layout`: contiguous, the last two axes transposed, every other element of a
    wider last axis, or one element into each row of a wider buffer."""
    if layout == "transposed" and len(shape) >= 2:
        return rng.standard_normal(shape[:-2] + shape[:-3:-1]).swapaxes(-1, -2)
    if layout == "sliced":
        return rng.standard_normal(shape[:-1] + (2 * shape[-1],))[..., ::2]
    if layout == "offset":
        return rng.standard_normal(shape[:-1] + (shape[-1] + 1,))[..., 1:]
    return rng.standard_normal(shape)


def build_program(rank, shape, varies, ops):
    """The fusion: x combined with each input in turn; an input is declared with extent 1 (a broadcast)
    on the axes it does not vary along."""
    shapes = [shape] + [tuple(n if v else 1 for n, v in zip(shape, vary)) for vary in varies]
    with bz.Fusion(name="rows") as f:
        ins = [f.define_tensor([-1 if n != 1 or s is shape else 1 for n in s], dtype=bz.float64) for s in shapes]
        y = ins[0]
        for op, other in zip(ops, ins[1:]):
            y = getattr(bz.ops, op)(y, other)
        f.add_output(y * 0.5)
    return f, shapes


def numpy_program(arrays, ops):
    y = arrays[0]
    for op, other in zip(ops, arrays[1:]):
        y = getattr(np, {"add": "add", "sub": "subtract", "mul": "multiply", "maximum": "maximum"}[op])(y, other)
    return y * 0.5


def random_program(rng):
    """A program as `programs` draws one, from a NumPy generator (for the NVRTC batch)."""
    rank = int(rng.choice([3, 4, 4, 5]))
    shape = tuple(int(n) for n in rng.choice([1, 2, 3, 5], rank))
    count = int(rng.integers(1, 3))
    varies = [tuple(bool(v) for v in rng.integers(0, 2, rank)) if rng.integers(0, 3) == 0 else
              tuple(axis < cut for axis in range(rank)) for cut in rng.integers(0, rank + 1, count)]
    ops = [str(rng.choice(OPS)) for _ in range(count)]
    layouts = [str(rng.choice(LAYOUTS)) for _ in range(count + 1)]
    return rank, shape, varies, layouts, ops


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**32 - 1))
def test_random_broadcasts_and_layouts_match_numpy(program, seed):
    rank, shape, varies, layouts, ops = program
    f, shapes = build_program(rank, shape, varies, ops)
    rng = np.random.default_rng(seed)
    arrays = [laid_out(rng, s, layout) for s, layout in zip(shapes, layouts)]
    for backend in BACKENDS:
        (got,) = run(f, arrays, backend)
        np.testing.assert_array_equal(got, numpy_program(arrays, ops))


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_random_programs_compile_with_nvrtc():
    """The CUDA of 80 random programs (some with rows of several axes) in one translation unit."""
    rng = np.random.default_rng(3)
    bodies, merged = [], 0
    for n in range(80):
        rank, shape, varies, layouts, ops = random_program(rng)
        f, shapes = build_program(rank, shape, varies, ops)
        arrays = [laid_out(rng, s, layout) for s, layout in zip(shapes, layouts)]
        merged += max(row_axes(f, arrays, gpu=True)) > 1
        bodies.append(engine.cuda_source(f, arrays).body.replace("rows_t", f"rows{n}_t"))
    assert merged >= 5
    nvrtc.compile_ptx(with_prelude("\n".join(bodies)), "rows", "sm_90", ("-G",))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, width", [((2, 3, 1), 4), ((1, 5, 1), 4), ((2, 3, 1), 1)])
def test_rows_ending_in_an_axis_of_extent_one_write_every_element(shape, width, backend):
    """A new axis of `width` before an axis of extent 1: the rows merge both (one loop over
    width * 1), and the axis of extent 1, a broadcast, has stride 0 where braze allocates the output:
    each element is written along the new axis, not along the axis that does not move."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape)
    with bz.Fusion(name="rows") as f:
        t = f.define_tensor([1 if n == 1 else -1 for n in shape], dtype=bz.float64)
        f.add_output(bz.ops.broadcast_in_dim(t * 2.0, [*shape[:2], width, 1], [0, 1, 3]))
    assert row_axes(f, [x], gpu=False) == [2] or width == 1
    (got,) = run(f, [x], backend)
    np.testing.assert_allclose(got, np.broadcast_to((x * 2.0)[:, :, None, :], (*shape[:2], width, 1)), rtol=1e-12)
