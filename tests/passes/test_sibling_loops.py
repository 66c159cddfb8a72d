"""Loops of one task over the same range merge into one pass when neither reads what the other
computes (passes/fuse_tasks.fuse_sibling_loops), and stay apart otherwise; stores between them
move after the merged loop; elementwise stores read back at the same index stay in a variable
(forward_stores)."""

from __future__ import annotations

from unittest import mock

from braze import dtypes as dt
from braze.kir import nodes as k
from braze.passes import fuse_tasks as fuse_tasks_module
from braze.passes.fuse_tasks import forward_stores, fuse_sibling_loops

F32, I32 = dt.float32, dt.int32
N = k.ScalarParam("n", I32)
X = k.ArrayParam("x", F32, 1, (1,))
OUT = k.ArrayParam("out", F32, 1, (1,))
ZERO = k.Const(0, I32)


def _sum_loop(acc: k.Var, var: k.Var, value=None) -> k.For:
    term = k.Load(X, (var,)) if value is None else value
    return k.For(var, ZERO, k.ScalarRef(N), (k.Assign(acc, k.Binary("reduce_add", acc, term, F32)),))


def _task(*body) -> k.Task:
    return k.Task("t", "range_for", tuple(body), k.Var("p", I32), ZERO, k.ScalarRef(N))


def _loops(task: k.Task) -> list[k.For]:
    return [s for s in task.body if isinstance(s, k.For)]


def test_two_sums_over_one_range_become_one_pass_and_the_store_between_moves_after_it():
    a, b, i, j = k.Var("a", F32), k.Var("b", F32), k.Var("i", I32), k.Var("j", I32)
    zero = k.Const(0.0, F32)
    task = _task(k.Let(a, zero), _sum_loop(a, i), k.Store(OUT, (ZERO,), a), k.Let(b, zero),
                 _sum_loop(b, j, k.Binary("mul", k.Load(X, (j,)), k.Load(X, (j,)), F32)),
                 k.Store(OUT, (k.Const(1, I32),), b))
    merged = fuse_sibling_loops(task)
    (loop,) = _loops(merged)
    assert len(loop.body) == 2 and loop.var == i
    assert isinstance(merged.body[0], k.Let) and isinstance(merged.body[1], k.Let)  # both initial values first
    assert [type(s) for s in merged.body[2:]] == [k.For, k.Store, k.Store]


def test_a_loop_reading_the_earlier_loops_result_stays_a_second_pass():
    total, dev, mean = k.Var("total", F32), k.Var("dev", F32), k.Var("mean", F32)
    i, j = k.Var("i", I32), k.Var("j", I32)
    zero = k.Const(0.0, F32)
    centered = k.Binary("sub", k.Load(X, (j,)), mean, F32)
    task = _task(k.Let(total, zero), _sum_loop(total, i),
                 k.Let(mean, k.Binary("truediv", total, k.Const(4.0, F32), F32)), k.Let(dev, zero),
                 _sum_loop(dev, j, k.Binary("mul", centered, centered, F32)))
    assert len(_loops(fuse_sibling_loops(task))) == 2


def test_a_loop_that_stores_or_reads_an_array_stored_before_it_is_not_merged():
    a, b, i, j = k.Var("a", F32), k.Var("b", F32), k.Var("i", I32), k.Var("j", I32)
    zero = k.Const(0.0, F32)
    reads_out = k.For(j, ZERO, k.ScalarRef(N), (k.Assign(b, k.Binary("reduce_add", b, k.Load(OUT, (j,)), F32)),))
    task = _task(k.Let(a, zero), _sum_loop(a, i), k.Store(OUT, (ZERO,), a), k.Let(b, zero), reads_out)
    assert len(_loops(fuse_sibling_loops(task))) == 2
    writes = k.For(j, ZERO, k.ScalarRef(N), (k.Store(OUT, (j,), k.Load(X, (j,))),))
    assert len(_loops(fuse_sibling_loops(_task(k.Let(a, zero), _sum_loop(a, i), writes)))) == 2


def test_loops_over_different_ranges_stay_apart():
    a, b, i, j = k.Var("a", F32), k.Var("b", F32), k.Var("i", I32), k.Var("j", I32)
    zero = k.Const(0.0, F32)
    shorter = k.For(j, ZERO, k.Const(3, I32), (k.Assign(b, k.Binary("reduce_add", b, k.Load(X, (j,)), F32)),))
    task = _task(k.Let(a, zero), _sum_loop(a, i), k.Let(b, zero), shorter)
    assert len(_loops(fuse_sibling_loops(task))) == 2


def test_a_value_stored_and_read_back_at_its_index_is_kept_in_a_variable():
    p = k.Var("p", I32)
    new = k.Binary("mul", k.Load(X, (p,)), k.Const(2.0, F32), F32)
    later = k.Binary("add", k.Load(OUT, (p,)), k.Const(1.0, F32), F32)
    other = k.ArrayParam("y", F32, 1, (1,))
    task = k.Task("t", "range_for", (k.Store(OUT, (p,), new), k.Store(other, (p,), later)), p, ZERO, k.ScalarRef(N))
    forwarded = forward_stores(task)
    kept, store, second = forwarded.body[0], forwarded.body[1], forwarded.body[2]
    assert isinstance(kept, k.Let) and kept.value == new and store.value == kept.var
    assert second.value == k.Binary("add", kept.var, k.Const(1.0, F32), F32)
    unread = k.Task("t", "range_for", (k.Store(OUT, (p,), new),), p, ZERO, k.ScalarRef(N))
    assert forward_stores(unread) is unread  # nothing reads it back: unchanged


def test_two_nests_over_the_same_ranges_merge_level_by_level():
    a, b = k.Var("a", F32), k.Var("b", F32)
    i, j, i2, j2 = (k.Var(name, I32) for name in ("i", "j", "i2", "j2"))
    zero = k.Const(0.0, F32)

    def nest(acc, outer, inner):
        add = k.Assign(acc, k.Binary("reduce_add", acc, k.Load(X, (k.Binary("add", outer, inner, I32),)), F32))
        return k.For(outer, ZERO, k.ScalarRef(N), (k.For(inner, ZERO, k.Const(3, I32), (add,)),))

    merged = fuse_sibling_loops(_task(k.Let(a, zero), nest(a, i, j), k.Let(b, zero), nest(b, i2, j2)))
    (outer,) = _loops(merged)
    (inner,) = outer.body
    assert isinstance(inner, k.For) and len(inner.body) == 2  # a perfect nest again, both sums inside


def test_a_definition_reading_an_array_stored_between_the_loops_keeps_them_apart():
    a, b, c, i, j = k.Var("a", F32), k.Var("b", F32), k.Var("c", F32), k.Var("i", I32), k.Var("j", I32)
    zero = k.Const(0.0, F32)
    scaled = k.Binary("mul", c, k.Load(X, (j,)), F32)
    task = _task(k.Let(a, zero), _sum_loop(a, i), k.Store(OUT, (ZERO,), a),
                 k.Let(c, k.Load(OUT, (ZERO,))), k.Let(b, zero), _sum_loop(b, j, scaled))
    # moving `c = out[0]` before the merged loop would read out[0] before `a` is stored there
    assert len(_loops(fuse_sibling_loops(task))) == 2


def _chain_of_sums(count: int) -> k.Task:
    """`count` sums over one range, each reading the one before (none merges with another)."""
    body, previous = [], None
    for n in range(count):
        acc, var = k.Var(f"a{n}", F32), k.Var(f"i{n}", I32)
        term = k.Load(X, (var,)) if previous is None else k.Binary("mul", k.Load(X, (var,)), previous, F32)
        body += [k.Let(acc, k.Const(0.0, F32)), _sum_loop(acc, var, term)]
        previous = acc
    return _task(*body)


def test_loops_asked_about_again_in_larger_tasks_are_walked_once():
    """A GPU plan tries the merge on task after task holding the same loops (each candidate pair of
    column tasks, the first one growing: engine._merged_row_tasks). Under remembered_walks() each
    loop is walked once whatever the number of tries: the walks grow linearly with the loops, where
    asking again each time grew them with their square."""
    counted = []
    real_walk = fuse_tasks_module._walk

    def counting_walk(node):
        counted.append(node)
        return real_walk(node)

    def walks(count: int) -> int:
        body = _chain_of_sums(count).body
        counted.clear()
        with mock.patch.object(fuse_tasks_module, "_walk", counting_walk), fuse_tasks_module.remembered_walks():
            for end in range(2, len(body) + 1, 2):
                assert len(_loops(fuse_sibling_loops(_task(*body[:end])))) == end // 2
        return len(counted)

    assert walks(60) < 2.5 * walks(30)


# --- a later fold moving up past statements it has no dependence on ------------------------------
Y = k.ArrayParam("y", F32, 1, (1,))


def _channel_task(between: tuple[k.Stmt, ...], later_term=None) -> k.Task:
    """batch_norm's channel task: a sum, then a loop writing the output from it (`between`), then the
    same sum again for the running mean, stored once folded."""
    a, b, i, j = k.Var("a", F32), k.Var("b", F32), k.Var("i", I32), k.Var("j", I32)
    zero = k.Const(0.0, F32)
    return _task(k.Let(a, zero), _sum_loop(a, i), *between, k.Let(b, zero), _sum_loop(b, j, later_term),
                 k.Store(OUT, (k.Const(1, I32),), b))


def _output_loop(value_of) -> k.For:
    m = k.Var("m", I32)
    return k.For(m, ZERO, k.ScalarRef(N), (k.Store(Y, (m,), value_of(m)),))


def test_a_fold_after_an_output_loop_joins_the_fold_before_it():
    a = k.Var("a", F32)
    scale = k.Var("scale", F32)
    between = (k.Let(scale, k.Binary("mul", a, k.Const(2.0, F32), F32)),
               _output_loop(lambda m: k.Binary("mul", k.Load(X, (m,)), scale, F32)))
    merged = fuse_sibling_loops(_channel_task(between))
    loops = _loops(merged)
    assert len(loops) == 2 and len(loops[0].body) == 2  # both sums in the first pass, the output after
    # The later sum's initial value moves before the merged loop; what read the first sum stays after it.
    assert [type(s) for s in merged.body] == [k.Let, k.Let, k.For, k.Let, k.For, k.Store]
    assert merged.body[3].var == scale


def test_a_fold_stays_after_statements_it_depends_on_either_way():
    a, b = k.Var("a", F32), k.Var("b", F32)
    reads_y = lambda j: k.Load(Y, (j,))  # noqa: E731
    # The later fold reads the array the output loop writes.
    writes_y = (_output_loop(lambda m: k.Load(X, (m,))),)
    assert len(_loops(fuse_sibling_loops(_channel_task(writes_y, reads_y(k.Var("j", I32)))))) == 3
    # A statement between reads the later fold's accumulator (its initial value, there).
    c = k.Var("c", F32)
    reads_b = (k.Let(b, k.Const(0.0, F32)), k.Let(c, b), k.Store(OUT, (ZERO,), c))
    task = _task(k.Let(a, k.Const(0.0, F32)), _sum_loop(a, k.Var("i", I32)), *reads_b,
                 _sum_loop(b, k.Var("j", I32)))
    assert len(_loops(fuse_sibling_loops(task))) == 2
    # A barrier between: the later fold's loads would move across it.
    assert len(_loops(fuse_sibling_loops(_channel_task((k.Sync(),))))) == 2
    # A jump between decides whether the later fold runs at all.
    assert len(_loops(fuse_sibling_loops(_channel_task((k.If(k.Var("flag", dt.bool_), (k.Continue(),)),))))) == 2
