"""Walks of the Kernel IR that visit each shared expression once (a value used twice is one node of
the DAG) decide as tree walks, which visit it once per path, did: the same nodes met in the same first
order, the same sizes, and for whole fusions the same kernels."""

from __future__ import annotations

import random

import pytest

import braze as bz
from braze import engine
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import Prepared
from braze.codegen import cuda_inner_outer, cuda_plan
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.passes import fuse_tasks
from braze.runtime.inputs import bind_inputs

I64 = bz.int64


def _tree_walk(node):
    yield node
    for child in fuse_tasks._children(node):
        yield from _tree_walk(child)


def _first_order(nodes) -> list:
    return list(dict.fromkeys(nodes))


def _random_dag(seed: int) -> k.Expr:
    """A value built from earlier ones, each used by several later: many paths to each node."""
    rng = random.Random(seed)
    values: list[k.Expr] = [k.Var("i", I64), k.Var("j", I64), k.Const(3, I64)]
    for _ in range(24):
        a, b = rng.choice(values[-5:]), rng.choice(values)
        kind = rng.choice(["binary", "binary", "neg", "load"])
        if kind == "binary":
            values.append(k.Binary(rng.choice(["add", "mul", "sub"]), a, b, I64))
        elif kind == "neg":
            values.append(k.Unary("neg", a, I64))
        else:
            values.append(k.Load(k.ArrayParam("x", I64, 2), (a, b)))
    return values[-1]


def _statements(e: k.Expr) -> tuple[k.Stmt, ...]:
    t = k.Var("t", I64)
    return (k.Let(t, e), k.Store(k.ArrayParam("y", I64, 1), (k.Var("i", I64),), k.Binary("add", e, t, I64)))


@pytest.mark.parametrize("seed", range(8))
def test_distinct_walks_meet_what_tree_walks_meet_in_the_same_order(seed: int) -> None:
    e = _random_dag(seed)
    assert cuda_plan.distinct_exprs(e) == _first_order(cuda_plan.sub_exprs(e))
    assert cuda_plan.vars_of(e) == {v for v in cuda_plan.sub_exprs(e) if isinstance(v, k.Var)}
    body = _statements(e)
    for s in body:
        tree = list(_tree_walk(s))
        walked = list(fuse_tasks._walk(s))
        assert _first_order(walked) == _first_order(tree)
        assert [n for n in walked if isinstance(n, k.Stmt)] == [n for n in tree if isinstance(n, k.Stmt)]
    assert fuse_tasks.body_size(body) == sum(1 for s in body for _ in _tree_walk(s))


def _tree_walks(monkeypatch) -> None:
    """The walkers as they were: a tree walk each, nothing kept on nodes or tasks."""
    every = lambda e: _first_order(cuda_plan.sub_exprs(e))  # noqa: E731
    variables = lambda e: frozenset(v for v in cuda_plan.sub_exprs(e) if isinstance(v, k.Var))  # noqa: E731
    for module in (cuda_plan, cuda_inner_outer):
        monkeypatch.setattr(module, "distinct_exprs", every)
        monkeypatch.setattr(module, "vars_of", variables)
    for module in (cuda_plan, cuda_inner_outer, engine):
        monkeypatch.setattr(module, "plan_lanes", cuda_plan._plan_lanes)
    monkeypatch.setattr(fuse_tasks, "_walk", _tree_walk)
    monkeypatch.setattr(fuse_tasks, "_kept", lambda task, name, make: make(task))


# Cases whose GPU plans merge tasks, carry column tasks in row tasks and fuse sibling loops.
MERGING = ["column_sum", "layer_norm_backward", "rms_norm_backward", "var_mean", "batch_norm", "group_norm",
           "adam", "dropout_residual_layer_norm"]


def _planned(name: str) -> str:
    prepared = Prepared(next(c for c in CASES if c.name == name), "quick")
    key = engine.signature(prepared.fusion, bind_inputs(prepared.fusion, prepared.inputs))
    return kernel_text(engine.plan_kernel(prepared.fusion, key, views_on_host=False, gpu=True)[1])


def test_suite_cases_plan_the_same_kernels_as_with_tree_walks(monkeypatch) -> None:
    planned = {name: _planned(name) for name in MERGING}
    _tree_walks(monkeypatch)
    for name in MERGING:
        assert _planned(name) == planned[name], name
