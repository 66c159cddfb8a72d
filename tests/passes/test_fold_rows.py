"""A task writing rows folded into the next task that reads them (braze/passes/fold_rows.py): what the
folded Kernel IR says, each condition that keeps two tasks apart, and the fusions it makes one task
on both backends (residual add, dropout + residual under rms_norm and layer_norm)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import braze as bz
from braze import config, engine
from braze import dtypes as dt
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.passes.fold_rows import fold_row_producers

F32, I64 = dt.float32, dt.int64
X, R, H, Y = (k.ArrayParam(name, F32, 2, (None, 1)) for name in ("X", "R", "H", "Y"))
N = k.ScalarRef(k.ScalarParam("n", I64))
ROWS = k.ScalarRef(k.ScalarParam("rows", I64))
P, ROW, J, S, ACC = k.Var("p"), k.Var("i"), k.Var("j"), k.Var("s"), k.Var("acc", F32)
ZERO = k.Const(0, I64)
HALF = k.Binary("floordiv", P, k.Const(2, I64), I64)  # a row two task indices share


def add(a, b, dtype=F32):
    return k.Binary("add", a, b, dtype)


def producer(value=None, lets=None, end=N) -> k.Task:
    """H[i, j] = X[i, j] + R[i, j] over the rows (i = p unless `lets` define it)."""
    value = add(k.Load(X, (ROW, J)), k.Load(R, (ROW, J))) if value is None else value
    lets = (k.Let(ROW, P),) if lets is None else lets
    return k.Task("make_h", "range_for", (*lets, k.For(J, ZERO, end, (k.Store(H, (ROW, J), value),))), P, ZERO, ROWS)


def consumer(read=lambda v: k.Load(H, (ROW, v)), first_end=N, extra: tuple[k.Stmt, ...] = (), begin=ZERO,
             row: k.Expr = P) -> k.Task:
    """acc = sum of H's row, then Y[i, j] = H[i, j] * acc."""
    body = (k.Let(ROW, row), *extra, k.Let(ACC, k.Const(0.0, F32)),
            k.For(S, ZERO, first_end, (k.Assign(ACC, k.Binary("reduce_add", ACC, read(S), F32)),)),
            k.For(J, ZERO, N, (k.Store(Y, (ROW, J), k.Binary("mul", k.Load(H, (ROW, J)), ACC, F32)),)))
    return k.Task("norm", "range_for", body, P, begin, ROWS)


def folded(*tasks: k.Task, pinned: frozenset[str] = frozenset()) -> k.Kernel:
    kernel = k.Kernel("kern", (X, R, H, Y, k.ScalarParam("n", I64), k.ScalarParam("rows", I64)), tasks)
    return fold_row_producers(kernel, pinned)


def lines(kernel: k.Kernel) -> list[str]:
    return [line.strip() for line in kernel_text(kernel).splitlines()[1:]]


def test_the_first_loop_over_the_row_computes_stores_and_uses_each_value_and_the_later_loops_read_it_back():
    assert lines(folded(producer(), consumer())) == [
        "task make_h__norm: range_for p in [0, rows)",
        "i: int64 = p",
        "acc: float32 = 0.0:float32",
        "for s in range(0, n):",
        "H_value_1: float32 = add(X[i, s], R[i, s])",
        "H[i, s] = H_value_1",
        "acc = reduce_add(acc, H_value_1)",
        "for j in range(0, n):",
        "Y[i, j] = mul(H[i, j], acc)",
    ]


def test_the_producers_row_definitions_are_the_consumers_own_or_made_again():
    other = k.Var("q")
    lets = (k.Let(other, k.Binary("floordiv", P, k.Const(2, I64), I64)), k.Let(ROW, P))
    value = add(k.Load(X, (ROW, J)), k.Cast(other, F32))
    text = "\n".join(lines(folded(producer(value, lets), consumer())))
    assert "q_1: int64 = floordiv(p, 2)" in text  # the consumer has no q: defined again, renamed apart
    assert "H_value_1: float32 = add(X[i, s], float32(q_1))" in text


def test_a_chain_of_row_tasks_becomes_one():
    h2 = k.ArrayParam("H2", F32, 2, (None, 1))
    second = k.Task("make_h2", "range_for", (k.Let(ROW, P), k.For(J, ZERO, N, (
        k.Store(h2, (ROW, J), k.Binary("mul", k.Load(H, (ROW, J)), k.Const(2.0, F32), F32)),))), P, ZERO, ROWS)
    kernel = folded(producer(), second, consumer(read=lambda v: k.Load(h2, (ROW, v))))
    assert lines(kernel)[3:9] == [
        "for s in range(0, n):",
        "H_value_2: float32 = add(X[i, s], R[i, s])",
        "H[i, s] = H_value_2",
        "H2_value_1: float32 = mul(H_value_2, 2.0:float32)",
        "H2[i, s] = H2_value_1",
        "acc = reduce_add(acc, H2_value_1)",
    ]
    assert [t.name for t in kernel.tasks] == ["make_h__norm"]


def _reads(index):
    return consumer(read=lambda v: k.Load(H, index(v)))


ONE = k.Const(1, I64)
APART = {
    "another row": lambda: (producer(), _reads(lambda v: (add(ROW, ONE, I64), v))),
    "another element of the row": lambda: (producer(), _reads(lambda v: (ROW, add(v, ONE, I64)))),
    "a loop over another range": lambda: (producer(), consumer(first_end=add(N, k.Const(-1, I64), I64))),
    "other task bounds": lambda: (producer(), consumer(begin=ONE)),
    "a first read outside a loop": lambda: (
        producer(), consumer(extra=(k.Let(k.Var("v", F32), k.Load(H, (ROW, ZERO))),))),
    "the consumer writes what the producer reads": lambda: (
        producer(), consumer(extra=(k.Store(X, (ROW, ZERO), k.Const(0.0, F32)),))),
    "the producer reads what it writes": lambda: (producer(add(k.Load(H, (ROW, J)), k.Load(X, (ROW, J)))), consumer()),
    "a row read down a column": lambda: (producer(), _reads(lambda v: (v, ROW))),
    "rows two task indices store": lambda: (producer(lets=(k.Let(ROW, HALF),)), consumer(row=HALF)),
}


@pytest.mark.parametrize("case", sorted(APART))
def test_two_tasks_stay_apart_unless_each_read_is_an_element_the_same_task_index_stored_first(case):
    kernel = folded(*APART[case]())
    assert len(kernel.tasks) == 2, case


def test_an_array_written_in_place_keeps_its_task():
    assert len(folded(producer(), consumer(), pinned=frozenset({"H"})).tasks) == 2


# --- fusions -------------------------------------------------------------------------------------
def residual_rms_norm(f: bz.Fusion, dtype=bz.bfloat16, rank: int = 2) -> None:
    x, r = (f.define_tensor([-1] * rank, dtype=dtype) for _ in range(2))
    w = f.define_tensor([-1], dtype=dtype)
    h = x + r
    f.add_output(bz.ops.rms_norm(h, w, eps=1e-6))
    f.add_output(h)


def dropout_residual_layer_norm(f: bz.Fusion, dtype=bz.bfloat16, rank: int = 2) -> None:
    x, r = (f.define_tensor([-1] * rank, dtype=dtype) for _ in range(2))
    w, b = (f.define_tensor([-1], dtype=dtype) for _ in range(2))
    keep = bz.ops.rand(x.shape, seed=1234) >= 0.1
    h = bz.ops.cast(bz.ops.where(keep, bz.ops.cast(x, bz.float32) * (1 / 0.9), 0.0) + bz.ops.cast(r, bz.float32), dtype)
    f.add_output(bz.ops.layer_norm(h, w, b, eps=1e-5))
    f.add_output(h)


def planned_tasks(build, gpu: bool, shape=(8, 64), **options) -> list[k.Task]:
    with bz.Fusion() as f:
        build(f, **options)
    rank = options.get("rank", 2)
    inputs = [np.ones(shape[-rank:] if t.ndim == rank else shape[-1:], ml_dtypes.bfloat16) for t in f.inputs]
    key = engine.signature(f, engine.bind_inputs(f, inputs))
    if gpu:
        return list(engine.plan_kernel(f, key, views_on_host=False, gpu=True)[1].tasks)
    return list(engine.lower_fusion(f, key).kernel.tasks)


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
@pytest.mark.parametrize("build", [residual_rms_norm, dropout_residual_layer_norm])
def test_a_norm_of_a_residual_it_returns_is_one_task(build, gpu):
    (task,) = planned_tasks(build, gpu)
    loops = [s for s in task.body if isinstance(s, k.For)]
    first_stores = [s.param.name for s in loops[0].body if isinstance(s, k.Store)]
    assert len(first_stores) == 1  # h, stored by the loop that sums the row
    later = {e.param.name for loop in loops[1:] for s in loop.body for e in _loads(s)}
    assert first_stores[0] in later  # ...and read back by the loops after it
    with config.scope(disable="fold_rows"):
        assert len(planned_tasks(build, gpu)) == 2


@pytest.mark.parametrize("shape", [(2, 3, 64), (2, 3, 5, 64)], ids=str)
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_rows_of_more_dimensions_fold_through_their_decomposed_indices(shape, gpu):
    (task,) = planned_tasks(residual_rms_norm, gpu=gpu, shape=shape, rank=len(shape))
    assert sum(isinstance(s, k.For) for s in task.body) == 2


def _loads(s: k.Stmt):
    for name in ("value", "cond"):
        e = getattr(s, name, None)
        if isinstance(e, k.Expr):
            stack = [e]
            while stack:
                node = stack.pop()
                if isinstance(node, k.Load):
                    yield node
                stack += [getattr(node, f) for f in getattr(node, "__dataclass_fields__", {})
                          if isinstance(getattr(node, f), k.Expr)]


def test_the_segments_dump_says_which_task_folded_into_which(capsys):
    with config.scope(dump="segments"):
        planned_tasks(residual_rms_norm, gpu=False)
    err = capsys.readouterr().err
    assert "===== braze dump: segments =====" in err
    assert "folded into" in err and "(passes/fold_rows.py)" in err
