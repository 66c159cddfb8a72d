"""Indexing by an integer array under `@bz.jit` (braze/ops/methods.py, `take` in
braze/ops/view_composites.py): NumPy's `x[:, [2, 1, 0]]`, `x[ids]`, `np.take`, torch's `t[ids]`,
`index_select`, `take` and `F.embedding`, against NumPy and torch; and what stays refused (a boolean
mask, two index arrays) says so."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz


@st.composite
def indexings(draw) -> tuple[np.ndarray, tuple, np.ndarray | None]:
    """An array of rank 1 to 3, and an index of it: one integer array (a list, an ndarray of rank 1 or 2
    made in the function, or an int64 argument) among ints, slices, None and one '...'. The third item
    is the index array passed as an argument, or None."""
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) * 1.5 - 3
    array_axis = draw(st.integers(0, len(shape) - 1))
    n = shape[array_axis]
    picks_shape = draw(st.sampled_from([(1,), (3,), (2, 2)]))
    picks = np.array(draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(picks_shape)),
                                   max_size=int(np.prod(picks_shape))))).reshape(picks_shape)
    kind = draw(st.sampled_from(["list", "ndarray", "argument"] if picks.ndim == 1 else ["ndarray", "argument"]))
    items: list = []
    for axis, extent in enumerate(shape):
        if axis == array_axis:
            items.append({"list": picks.tolist(), "ndarray": ("ndarray", picks), "argument": "argument"}[kind])
            continue
        items.append(draw(st.one_of(st.just(slice(None)), st.integers(-extent, extent - 1),
                                    st.builds(slice, st.integers(-extent, extent), st.integers(-extent, extent)))))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    skipped = [n for n, item in enumerate(items) if item == slice(None)]
    if skipped and draw(st.booleans()):  # '...' stands for one full slice
        items[skipped[0]] = Ellipsis
    return x, tuple(items), picks if kind == "argument" else None


def _index(items: tuple, picks: object) -> tuple:
    """The index as the function writes it: an ndarray made in the call, or the argument."""
    def one(item):
        if isinstance(item, tuple) and item[0] == "ndarray":
            return np.array(item[1])
        return picks if isinstance(item, str) and item == "argument" else item
    return tuple(one(item) for item in items)


@pytest.mark.parametrize("backend", ["llvm", "reference"])
@settings(max_examples=40, deadline=None)
@given(indexings())
def test_random_indexing_by_an_integer_array_gives_numpys_result(backend, case) -> None:
    x, items, picks = case
    expected = x[_index(items, picks)]
    fn = bz.jit(lambda x, picks: x[_index(items, picks)] * 2, backend=backend)
    actual = fn(x, picks if picks is not None else np.zeros(1, np.int64))
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected * 2)


def test_an_index_array_follows_its_values_from_call_to_call() -> None:
    """An index array is an input: new values in the next call are read, with no new trace."""
    traces = []

    def pick(x, ids):
        traces.append(1)
        return x[ids] + 1

    fn = bz.jit(pick)
    x = np.arange(12.0).reshape(4, 3)
    for ids in (np.array([3, 0]), np.array([1, -1])):
        np.testing.assert_array_equal(fn(x, ids), x[ids] + 1)
    assert len(traces) == 1


@pytest.mark.parametrize("index, message", [
    (lambda x: x[x > 0], r"index 0: .* got a boolean mask: the result's length depends on the data.*np\.where"),
    (lambda x: x[:, [True, False, True]], r"index 1: .* got a boolean mask"),
    (lambda x: x[None, [0, 1], [1, 2]], r"indices 1 and 2 are integer arrays beside an int or None"),
    (lambda x: x[..., 1.5], r"index 1: expected ints, slices, None, '...' or one integer array, got float 1.5$"),
    (lambda x: x[[]], r"dimension 0: expected a non-empty list of indices, got \[\]"),
])
def test_indexing_braze_does_not_take_is_refused_by_name(index, message) -> None:
    with pytest.raises(bz.UnsupportedError, match=message):
        bz.jit(index)(np.ones((3, 3)))


def test_a_long_list_of_indices_is_a_gather() -> None:
    """40 ints are taken in as one index array, not joined as 40 slices."""
    x = np.arange(120.0).reshape(2, 60)
    order = list(range(59, 19, -1))
    np.testing.assert_array_equal(bz.jit(lambda x: x[:, order] * 2)(x), x[:, order] * 2)


def test_an_index_out_of_range_of_a_list_is_an_error() -> None:
    with pytest.raises(bz.Error, match=r"index 5 of dimension 0 must lie within its extent"):
        bz.jit(lambda x: x[[0, 5]])(np.ones((3, 2)))


def _torch_device(name: str):
    torch = pytest.importorskip("torch")
    if name == "cuda":
        from braze.compile import cuda_driver
        if cuda_driver.device_count() == 0 or not torch.cuda.is_available():
            pytest.skip("no GPU")
    return torch


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_torch_gathers_by_indexing_and_by_name(device) -> None:
    torch = _torch_device(device)
    functional = torch.nn.functional
    table = torch.randn(10, 4, dtype=torch.float64, device=device)
    ids = torch.tensor([[3, 0, 9], [1, 1, -2]], device=device)
    programs = [
        lambda t, i: t[i] * 2,
        lambda t, i: t[:, [3, 0]] - t[i[0], :2].sum(0),
        lambda t, i: torch.index_select(t[:3], 1, i[0, :2].abs()) + t.index_select(0, i[1].abs())[:, :2],
        lambda t, i: t.take(i) + torch.take(t, i.abs()),
        lambda t, i: functional.layer_norm(functional.embedding(i.abs(), t), (4,)),
    ]
    for program in programs:
        torch.testing.assert_close(bz.jit(program)(table, ids), program(table, ids))
    vocabulary = torch.randn(5000, 64, dtype=torch.float32, device=device)  # an embedding's lookup, then a norm
    tokens = torch.randint(0, 5000, (8, 33), device=device)
    lookup = lambda w, i: functional.rms_norm(w[i] * 8.0, (64,))  # noqa: E731
    torch.testing.assert_close(bz.jit(lookup)(vocabulary, tokens), lookup(vocabulary, tokens))


def test_repeat_is_numpys_on_numpy_arrays_and_torchs_on_tensors() -> None:
    torch = pytest.importorskip("torch")
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(bz.jit(lambda a: a.repeat(2))(x), x.repeat(2))
    t = torch.arange(6.0).reshape(2, 3)
    torch.testing.assert_close(bz.jit(lambda a: a.repeat(2, 1))(t), t.repeat(2, 1))
