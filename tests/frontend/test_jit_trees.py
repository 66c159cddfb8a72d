"""`@bz.jit` arguments that hold arrays in dicts, lists and tuples (braze/frontend/jit_trees.py): a
model's parameters by name, optimizer states, nested pairs; checked against the same function run by
NumPy in float64, traced once per structure."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze.frontend.jit_trees import is_tree

rng = np.random.default_rng(7)
Moments = namedtuple("Moments", "m v")


def adam(params, grads, state, lr, step, betas=(0.9, 0.999)):
    """One Adam step over dicts of arrays, its moments in a namedtuple of dicts."""
    b1, b2 = betas
    new_params, m, v = {}, {}, {}
    for name, p in params.items():
        m[name] = b1 * state.m[name] + (1 - b1) * grads[name]
        v[name] = b2 * state.v[name] + (1 - b2) * grads[name] ** 2
        update = (m[name] / (1 - b1**step)) / (np.sqrt(v[name] / (1 - b2**step)) + 1e-8)
        new_params[name] = p - lr * update
    return new_params, Moments(m, v)


def _model(width: int) -> dict:
    return {"layer.0.weight": rng.standard_normal((width, 3)).astype(np.float32),
            "layer.0.bias": rng.standard_normal(width).astype(np.float32)}


def test_an_optimizer_step_over_dicts_of_parameters_traces_once():
    step = bz.jit(adam)
    params = _model(4)
    state = Moments({k: np.zeros_like(p) for k, p in params.items()}, {k: np.zeros_like(p) for k, p in params.items()})
    wide = {k: p.astype(np.float64) for k, p in params.items()}
    wide_state = Moments(dict(state.m), dict(state.v))
    for t in range(1, 4):
        grads = {k: rng.standard_normal(p.shape).astype(np.float32) for k, p in params.items()}
        params, state = step(params, grads, state, 1e-2 * t, t)
        wide, wide_state = adam(wide, {k: g.astype(np.float64) for k, g in grads.items()}, wide_state, 1e-2 * t, t)
        assert isinstance(state, Moments) and list(params) == list(wide)
        for name in wide:
            np.testing.assert_allclose(params[name], wide[name], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(state.v[name], wide_state.v[name], rtol=1e-5, atol=1e-7)
    assert len(step.trees) == 1 and sum(len(t) for inner in step.trees.values() for t in inner.fusions.values()) == 1


def test_a_new_structure_traces_again_and_options_inside_stay_options():
    @bz.jit
    def combine(pair, scales, axes):
        first, second = pair[0], pair[1]
        return (first * scales["first"] + second * scales["second"]).sum(axes)

    x, y = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(combine((x, y), {"first": 2.0, "second": 0.5}, (0, 2)), (2 * x + 0.5 * y).sum((0, 2)))
    np.testing.assert_allclose(combine((x, y), {"first": 3.0, "second": 1.0}, (0, 2)), (3 * x + y).sum((0, 2)))
    assert len(combine.trees) == 1  # the scales are runtime numbers: new values, the same trace
    assert sum(len(t) for t in next(iter(combine.trees.values())).fusions.values()) == 1
    np.testing.assert_allclose(combine([x, y], {"first": 3.0, "second": 1.0}, (1,)), (3 * x + y).sum(1))
    np.testing.assert_allclose(combine([x, y, x], {"first": 1.0, "second": 1.0}, (0,)), (x + y).sum(0))
    assert len(combine.trees) == 3  # a list for the tuple, a third item: a structure each (axes key a trace)


def test_lists_of_torch_tensors_come_back_as_torch_tensors():
    torch = pytest.importorskip("torch")

    @bz.jit
    def scale_all(tensors, factor):
        return [t * factor for t in tensors]

    tensors = [torch.randn(3), torch.randn(2, 2)]
    out = scale_all(tensors, 3.0)
    assert all(isinstance(o, torch.Tensor) for o in out)
    for o, t in zip(out, tensors, strict=True):
        torch.testing.assert_close(o, t * 3.0)


def test_a_bad_leaf_is_named_by_its_place():
    with pytest.raises(bz.InputError, match="argument 'params_b'.* got object"):
        bz.jit(lambda params: params["w"] * 2)({"w": np.ones(2), "b": object()})


def _trees(leaves):
    """Nested dicts, lists and tuples over `leaves`."""
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3), st.tuples(inner, inner),
        st.dictionaries(st.sampled_from(["a", "b.c", "0", "if", "x y"]), inner, min_size=1, max_size=3)),
        max_leaves=6)


def _scaled(tree, factor):
    """Every array of `tree` times factor, in the same structure (lists and tuples alike, as a result's)."""
    if isinstance(tree, dict):
        return {k: _scaled(v, factor) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return tuple(_scaled(v, factor) for v in tree)
    return tree * factor


@settings(max_examples=25, deadline=None)
@given(tree=_trees(st.integers(1, 4).map(lambda n: rng.standard_normal(n).astype(np.float32))),
       factor=st.floats(-2, 2, width=32))
def test_random_trees_of_arrays_come_back_scaled_in_their_structure(tree, factor):
    if not is_tree(tree):
        tree = [tree]
    got = bz.jit(_scaled)(tree, factor)
    expected = _scaled(tree, np.float32(factor))
    assert _structure_of(got) == _structure_of(expected)
    for g, e in zip(_leaves_of(got), _leaves_of(expected), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6)


def _structure_of(tree):
    if isinstance(tree, dict):
        return {k: _structure_of(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_structure_of(v) for v in tree)
    return tree.shape


def _leaves_of(tree):
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _leaves_of(v)]
    if isinstance(tree, tuple):
        return [leaf for v in tree for leaf in _leaves_of(v)]
    return [tree]
