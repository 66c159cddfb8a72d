"""The guard of a prepared call on torch inputs (runtime/fast_call.py): it says yes exactly for
tensors described as the ones it was made from, and never raises. Needs torch (any build)."""

from __future__ import annotations

import pytest

from braze.runtime import fast_call

torch = pytest.importorskip("torch")


def guard(inputs: list, scalar_positions: frozenset[int]):
    made = fast_call.guard(inputs, scalar_positions)
    return None if made is None else made.function()


def test_the_guard_matches_the_same_description_only() -> None:
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    matches = guard([x, y, 2.0], frozenset({2}))
    assert matches is not None
    assert matches([torch.randn(8, 4), torch.randn(8, 4), -1.5])
    for other in ([x, y.double(), 2.0],                      # dtype
                  [x, torch.randn(8, 5), 2.0],               # shape
                  [x, torch.randn(4, 8).t(), 2.0],           # strides
                  [x, y, 2],                                 # a scalar's type
                  [x, y],                                    # the count
                  [x, y, 2.0, 3.0],
                  [x, y.numpy(), 2.0],                       # another library
                  [x, 1.0, 2.0]):
        assert not matches(other), other


def test_one_tensor_passed_twice_makes_a_guard_but_takes_the_key() -> None:
    x = torch.randn(5)
    matches = guard([x, x], frozenset())
    assert matches is not None and matches([torch.randn(5), torch.randn(5)]) and not matches([x, x])
    assert not matches([torch.randn(5).requires_grad_(), torch.randn(5)])


def test_no_guard_for_inputs_of_other_libraries() -> None:
    np = pytest.importorskip("numpy")
    assert guard([np.zeros(3), torch.zeros(3)], frozenset()) is None
