"""Output aliases: `evaluate` views of inputs, `reuse_buffer` in-place writes, hidden outputs and
`stride_order=` on add_output."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze.ir.fusion import AliasKind


def arange(shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


def kinds(f: bz.Fusion) -> list[AliasKind]:
    return [o.alias for o in f.outputs]


# --- evaluate: views of an input -------------------------------------------------------------------
VIEWS = {
    "T": (lambda x: x.T, lambda a: a.T),
    "permute": (lambda x: x.permute(1, 0, 2), lambda a: a.transpose(1, 0, 2)),
    "slice": (lambda x: x[1:, ::2, ::-1], lambda a: a[1:, ::2, ::-1]),
    "int index": (lambda x: x[1], lambda a: a[1]),
    "new axis": (lambda x: x[:, None], lambda a: a[:, None]),
    "flip": (lambda x: x.flip(1), lambda a: np.flip(a, 1)),
    "flip all": (lambda x: bz.ops.flip(x), lambda a: np.flip(a)),
    "chain": (lambda x: x[::2].T.flip(0), lambda a: np.flip(a[::2].T, 0)),
    "itself": (lambda x: x, lambda a: a),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_evaluate_output_is_a_view_of_the_input(name: str) -> None:
    build, numpy_view = VIEWS[name]
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1), name="x")
        f.add_output(build(x))
    assert kinds(f) == [AliasKind.EVALUATE]
    assert f.outputs[0].aliased_input is x
    a = arange((3, 4, 5))
    (y,) = f.execute([a])
    assert np.shares_memory(y, a)
    np.testing.assert_array_equal(y, numpy_view(a))
    a += 100  # a view keeps following its input
    np.testing.assert_array_equal(y, numpy_view(a))


def test_evaluate_expand_of_a_broadcast_input() -> None:
    with bz.Fusion() as f:
        b = f.define_tensor((1, -1), name="b")
        f.add_output(bz.ops.expand(b, (4, -1)))
    assert kinds(f) == [AliasKind.EVALUATE]
    a = arange((1, 3))
    (y,) = f.execute([a])
    assert y.shape == (4, 3)
    assert np.shares_memory(y, a)
    assert y.strides[0] == 0
    np.testing.assert_array_equal(y, np.broadcast_to(a, (4, 3)))


def test_evaluate_view_of_the_second_input() -> None:
    with bz.Fusion() as f:
        f.define_tensor((-1,), name="x")
        w = f.define_tensor((-1, -1), name="w")
        f.add_output(w.T)
    assert f.outputs[0].aliased_input is w
    x, a = arange((2,)), arange((2, 3))
    (y,) = f.execute([x, a])
    assert np.shares_memory(y, a) and not np.shares_memory(y, x)
    np.testing.assert_array_equal(y, a.T)


# --- dynamic aliases: views whose bounds come from other inputs' extents ------------------------------
@pytest.mark.parametrize("backend", ["reference", "llvm"])
def test_dynamic_alias_slices_by_another_inputs_extent(backend: str) -> None:
    with bz.Fusion() as f:
        x, marker = f.define_tensor([-1, -1]), f.define_tensor([-1], dtype=bz.int8)
        n = marker.shape[0]
        f.add_output(x[1:n, n - 1:])
    assert kinds(f) == [AliasKind.EVALUATE]
    a = arange((10, 6))
    for length in (4, 1, 8, 30):  # the bounds are clamped to the dimension, as Python's are
        (view,) = f.execute([a, np.zeros(length, np.int8)], backend=backend)
        np.testing.assert_array_equal(view, a[1:length, length - 1:])
        assert view.size == 0 or np.shares_memory(view, a)


def test_dynamic_alias_through_a_compiled_output() -> None:
    with bz.Fusion() as f:
        x, y = f.define_tensor([-1]), f.define_tensor([-1])
        f.add_output(x[: y.shape[0]])
        f.add_output(x[: y.shape[0]] * y)
    a, b = arange((9,)), arange((5,)) + 1
    view, product = f.execute([a, b])
    assert np.shares_memory(view, a)
    np.testing.assert_array_equal(product, a[:5] * b)


def test_extent_bounds_need_a_positive_step() -> None:
    with bz.Fusion() as f, pytest.raises(bz.FusionDefinitionError, match="positive step"):
        x, y = f.define_tensor([-1]), f.define_tensor([-1])
        x[y.shape[0]::-1]


def test_computed_outputs_are_new_buffers() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        f.add_output(x.T * 1)
        f.add_output((x + 0)[::2])  # a view of an intermediate, not of an input
        f.add_output(x.reshape((-1,)))  # reshape is not an evaluate op
    assert kinds(f) == [AliasKind.NEW] * 3
    a = arange((4, 3))
    outs = f.execute([a])
    for y in outs:
        assert not np.shares_memory(y, a)
    np.testing.assert_array_equal(outs[0], a.T)
    np.testing.assert_array_equal(outs[1], a[::2])
    np.testing.assert_array_equal(outs[2], a.ravel())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["T", "flip0", "flip1", "rev", "step2", "drop1", "unsq"]), max_size=4),
       st.integers(1, 5), st.integers(1, 5))
def test_random_view_chains_stay_views(chain: list[str], m: int, n: int) -> None:
    steps = {
        "T": (lambda x: x.T, lambda a: a.T),
        "flip0": (lambda x: x.flip(0), lambda a: np.flip(a, 0)),
        "flip1": (lambda x: x.flip(-1), lambda a: np.flip(a, -1)),
        "rev": (lambda x: x[::-1], lambda a: a[::-1]),
        "step2": (lambda x: x[:, ::2], lambda a: a[:, ::2]),
        "drop1": (lambda x: x[1:], lambda a: a[1:]),
        "unsq": (lambda x: x[None].squeeze(0), lambda a: a),
    }
    with bz.Fusion() as f:
        y = f.define_tensor((-1, -1), name="x")
        for s in chain:
            y = steps[s][0](y)
        f.add_output(y)
    assert kinds(f) == [AliasKind.EVALUATE]
    a = arange((m, n))
    expected = a
    for s in chain:
        expected = steps[s][1](expected)
    (out,) = f.execute([a])
    np.testing.assert_array_equal(out, expected)
    assert out.size == 0 or np.shares_memory(out, a)


# --- reuse_buffer: written in place into an input ----------------------------------------------
def test_reuse_buffer_writes_into_the_input() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        b = f.define_tensor((-1,), name="b")
        f.add_output(x * 2 + b, alias=x)
    assert kinds(f) == [AliasKind.REUSE_BUFFER]
    a, bias = arange((3, 4)), arange((4,))
    original = a.copy()
    (y,) = f.execute([a, bias])
    assert y is a
    np.testing.assert_array_equal(a, original * 2 + bias)
    np.testing.assert_array_equal(bias, arange((4,)))


def test_reuse_buffer_into_a_non_contiguous_input() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        f.add_output(x + 1, alias=x)
    base = arange((4, 6))
    view = base[::2, ::-1]
    (y,) = f.execute([view])
    assert np.shares_memory(y, base)
    expected = arange((4, 6))
    expected[::2] += 1
    np.testing.assert_array_equal(base, expected)


def test_reuse_buffer_with_other_outputs() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        f.add_output(x * 10)
        f.add_output(x + 1, alias=x)
        f.add_output(x - 1)
    a = arange((4,))
    before, updated, after = f.execute([a])
    assert updated is a
    np.testing.assert_array_equal(a, np.arange(4) + 1)
    np.testing.assert_array_equal(before, np.arange(4) * 10)
    np.testing.assert_array_equal(after, np.arange(4) - 1)  # computed from the input as it was


def test_hidden_reuse_buffer_updates_in_place_without_returning() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        f.add_output(x * 3)
        f.add_output(x + 1, alias=x, hidden=True)
    assert [o.hidden for o in f.outputs] == [False, True]
    a = arange((4,))
    outs = f.execute([a])
    assert len(outs) == 1
    np.testing.assert_array_equal(outs[0], np.arange(4) * 3)
    np.testing.assert_array_equal(a, np.arange(4) + 1)


def test_reuse_buffer_swap_two_inputs() -> None:
    with bz.Fusion() as f:
        a = f.define_tensor((-1,), name="a")
        b = f.define_tensor((-1,), name="b")
        f.add_output(b, alias=a)
        f.add_output(a, alias=b)
    xa, xb = np.zeros(3, np.float32), np.ones(3, np.float32)
    f.execute([xa, xb])
    np.testing.assert_array_equal(xa, np.ones(3))
    np.testing.assert_array_equal(xb, np.zeros(3))


def test_new_view_output_after_reuse_buffer_sees_the_original_input() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((2, 3), name="x")
        f.add_output(x + 1, alias=x)
        f.add_output(x.reshape((6,)))
    a = np.zeros((2, 3), np.float32)
    _, flat = f.execute([a])
    np.testing.assert_array_equal(a, np.ones((2, 3)))
    np.testing.assert_array_equal(flat, np.zeros(6))


def test_two_reuse_buffer_outputs_into_one_input_are_rejected() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        f.add_output(x + 1, alias=x)
        with pytest.raises(bz.FusionDefinitionError, match=r"alias.*\('x'\)"):
            f.add_output(x * 3, alias=x)


def _readonly() -> np.ndarray:
    a = np.zeros((2, 3), np.float32)
    a.setflags(write=False)
    return a


@pytest.mark.parametrize("make", [lambda: np.broadcast_to(np.zeros(3, np.float32), (2, 3)), _readonly],
                         ids=["broadcast", "readonly"])
def test_reuse_buffer_into_a_read_only_input_is_an_input_error(make) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        f.add_output(x + 1, alias=x)
    with pytest.raises(bz.InputError, match=r"input 0 \('x'\)"):
        f.execute([make()])


@pytest.mark.parametrize("strides", [(4, 4), (0, 4)], ids=["sliding window", "broadcast"])
def test_reuse_buffer_into_an_input_whose_elements_share_addresses_is_an_input_error(strides) -> None:
    """The kernel would read what it wrote for another element (a sliding window gave 7 for
    element (0, 1) of x * 2 + 1 over [0, 1, 2, 3]: (1 * 2 + 1) * 2 + 1), as torch refuses."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        f.add_output(x * 2 + 1, alias=x)
    memory = np.arange(4, dtype=np.float32)
    window = np.lib.stride_tricks.as_strided(memory, (2, 3), strides)  # writable
    with pytest.raises(bz.InputError, match=r"input 0 \('x'\): expected an array whose elements lie at distinct "
                                            rf"addresses .* got shape \(2, 3\) with strides \({strides[0]}, 4\)"):
        f.execute([window])
    np.testing.assert_array_equal(memory, np.arange(4))


# --- hidden outputs ---------------------------------------------------------------------------
def test_hidden_outputs_are_not_returned() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        f.add_output(x + 1, hidden=True)
        f.add_output(x * 2)
        f.add_output(x.flip(0), hidden=True)
        f.add_output(x - 1)
    assert len(f.returned_outputs) == 2
    a = arange((3,))
    outs = f.execute([a])
    assert len(outs) == 2
    np.testing.assert_array_equal(outs[0], a * 2)
    np.testing.assert_array_equal(outs[1], a - 1)


# --- stride_order on add_output ---------------------------------------------------------------
def test_stride_order_nchw_to_nhwc() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1, -1), name="x")
        f.add_output(bz.ops.relu(x - 5), stride_order=(3, 0, 2, 1))
    assert kinds(f) == [AliasKind.NEW]
    n, c, h, w = 2, 3, 4, 5
    a = arange((n, c, h, w))
    (y,) = f.execute([a])
    assert y.shape == (n, c, h, w)
    item = y.itemsize
    assert y.strides == (h * w * c * item, item, w * c * item, c * item)
    np.testing.assert_array_equal(y, np.maximum(a - 5, 0))
    assert np.transpose(y, (0, 2, 3, 1)).flags.c_contiguous  # NHWC memory


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_stride_order_two_dims(order: tuple[int, int]) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        f.add_output(x * 2, stride_order=order)
    a = arange((3, 4))
    (y,) = f.execute([a])
    assert y.flags.f_contiguous if order == (0, 1) else y.flags.c_contiguous
    np.testing.assert_array_equal(y, a * 2)


def test_stride_order_on_a_view_makes_a_new_buffer() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1), name="x")
        f.add_output(x.permute(2, 0, 1), stride_order=(1, 0, 2))
    assert kinds(f) == [AliasKind.NEW]
    a = arange((2, 3, 4))
    (y,) = f.execute([a])
    assert not np.shares_memory(y, a)
    np.testing.assert_array_equal(y, a.transpose(2, 0, 1))
    # y is (4, 2, 3); stride_order (1, 0, 2): dim 2 slowest, then dim 0, dim 1 fastest.
    assert y.strides == (2 * 4, 4, 4 * 2 * 4)


def test_stride_order_on_an_input_output_leaves_the_input_alone() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        f.add_output(x, stride_order=(0, 1))
    assert x.stride_order is None
    a = arange((2, 3))
    (y,) = f.execute([a])
    assert y.flags.f_contiguous and not np.shares_memory(y, a)
    np.testing.assert_array_equal(y, a)
