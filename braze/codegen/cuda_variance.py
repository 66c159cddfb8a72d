"""A row's variance in one pass over memory instead of two (group_norm's and batch_norm's statistics).

The lowering (braze/lower/reductions.py `_var`) computes a variance in two passes, as NumPy does:

    s = 0;  for r: s = reduce_add(s, g(r))
    m = s / n
    q = 0;  for r: q = reduce_add(q, (g(r) - m) * (g(r) - m))

Where the row stays on chip between them (a row cache: var_mean, layer_norm) the second pass costs no
memory traffic. Where it does not (rows of 65536 elements; a channel's statistics over batch and
pixels; a row split across blocks, whose mean is known only once every block has finished) the second
pass reads the row from DRAM again. `one_pass_variance` takes the second pass's dependence on m away,
with float64 sums shifted by the row's first element k:

    d1 = 0;  d2 = 0;  for r: d = float64(g(r) - k);  d1 = reduce_add(d1, d);  d2 = reduce_add(d2, d * d)
    q = d2 - 2 (m - k) d1 + N (m - k)^2          (N: the elements of the row)

which is sum((g - m)^2) for any m, and then joins the two loops into one (passes/fuse_tasks.py
`fuse_sibling_loops`), the statements that read the first loop's results moving after the joined
one. Every accumulator is a plain sum, so the loop takes every schedule a sum takes (lanes, a row
split across blocks, column strips, the whole grid).

With m the mean, q = (d2 - d1^2 / N) + N (m - k - d1 / N)^2: the subtraction multiplies the relative
error of the sums by about 1 + (k - m)^2 / var (Chan, Golub and LeVeque, "Algorithms for computing the
sample variance", 1983). Shifting by an element of the row keeps that factor small for most rows, and
the float64 sums leave room for a large one (a first element 1000 standard deviations from the mean
still gives a variance as accurate as float32's two passes). A constant row gives d1 = d2 = 0, so
q = N (m - k)^2: exactly 0 where its mean rounds to the constant, as two passes give.

The rewrite applies to the top-level statements of a task (a row of a range_for task, the whole of
a serial one), and only where the loops do join.
"""

from __future__ import annotations

import dataclasses

from braze import dtypes as dt
from braze.codegen.cuda_plan import exprs_of, perfect_nest, sub_exprs, substituted, walk
from braze.kir import nodes as k
from braze.passes.fuse_tasks import fuse_sibling_loops
from braze.passes.simplify import reuse_reductions


@dataclasses.dataclass(frozen=True)
class _Deviations:
    """A pass of squared deviations: a perfect nest whose innermost body folds
    `q = reduce_add(q, (g - m) * (g - m))` (`fold`), besides definitions and folds of its own."""

    nest: list[k.For]
    fold: k.Assign
    g: k.Expr  # the element, with the body's definitions inlined
    m: k.Expr  # what it deviates from: a value of the row

    @property
    def q(self) -> k.Var:
        return self.fold.var


def one_pass_task(task: k.Task) -> k.Task | None:
    """`task` with its two-pass variances made one pass each (see the module docstring), or None
    when it has none."""
    body = one_pass_variance(task.body)
    # Two variances of the same rows (merged tasks': batch_norm's output and its running variance) are
    # now the same shifted sums: one of each is kept.
    return None if body is None else reuse_reductions(dataclasses.replace(task, body=body))


def one_pass_variance(stmts: tuple[k.Stmt, ...]) -> tuple[k.Stmt, ...] | None:
    """The statements with each squared-deviation loop joined to the loop before it, or None when
    none joins."""
    changed = False
    while (rewritten := _first_join(stmts)) is not None:
        stmts, changed = rewritten, True
    return stmts if changed else None


def _first_join(stmts: tuple[k.Stmt, ...]) -> tuple[k.Stmt, ...] | None:
    for position, stmt in enumerate(stmts):
        deviations = _deviations(stmt, stmts[:position])
        if deviations is None:
            continue
        shifted = _shifted(stmts, position, deviations)
        if shifted is None:
            continue
        joined = fuse_sibling_loops(k.Task("row", "serial", shifted)).body
        if _loops(joined) < _loops(stmts):
            return joined
    return None


def _loops(stmts: tuple[k.Stmt, ...]) -> int:
    return sum(isinstance(s, k.For) for s in stmts)


def _inlined(e: k.Expr, lets: dict[k.Var, k.Expr]) -> k.Expr:
    return substituted(e, lets, inline=True)


def _lets(stmts: tuple[k.Stmt, ...]) -> dict[k.Var, k.Expr]:
    """The values the statements define and never assign again."""
    assigned = {s.var for s in walk(stmts) if isinstance(s, k.Assign)}
    return {s.var: s.value for s in stmts if isinstance(s, k.Let) and s.var not in assigned}


def _reads(stmt: k.Stmt) -> set[k.Expr]:
    return {e for s in walk((stmt,)) for x in exprs_of(s) for e in sub_exprs(x)}


def _deviations(stmt: k.Stmt, before: tuple[k.Stmt, ...]) -> _Deviations | None:
    """The squared-deviation pass when `stmt` is one, its sum starting at 0 in `before` (see
    _Deviations)."""
    nest = perfect_nest(stmt) if isinstance(stmt, k.For) else None
    if nest is None or not all(isinstance(s, (k.Let, k.Assign)) for s in nest[-1].body):
        return None
    body = nest[-1].body
    lets, indices = _lets(body), {level.var for level in nest}
    changing = indices | {s.var for s in body}  # what changes along the row: no value of the row
    for fold in (s for s in body if isinstance(s, k.Assign)):
        value, start = _inlined(fold.value, lets), _lets(before).get(fold.var)
        if not (isinstance(value, k.Binary) and value.op == "reduce_add" and value.a == fold.var
                and fold.var.dtype.is_floating and isinstance(start, k.Const) and start.value == 0):
            continue
        square = value.b
        if not (isinstance(square, k.Binary) and square.op == "mul" and square.a == square.b
                and isinstance(square.a, k.Binary) and square.a.op == "sub"):
            continue
        g, m = square.a.a, square.a.b
        element_reads, value_reads = set(sub_exprs(g)), set(sub_exprs(m))
        # g an element of the row (its indices, values of the row), m a value of the row, q folded once.
        if indices & element_reads and not (changing - indices) & element_reads and not changing & value_reads \
                and [s for s in body if s.var == fold.var] == [fold]:
            return _Deviations(nest, fold, g, m)
    return None


def _shifted(stmts: tuple[k.Stmt, ...], position: int, deviations: _Deviations) -> tuple[k.Stmt, ...] | None:
    """The statements with the deviation pass at `position` summing shifted elements instead (see
    the module docstring), and the statements between it and the loop before it that read that
    loop's results moved after it; None when they cannot move."""
    previous = max((n for n, s in enumerate(stmts[:position]) if isinstance(s, k.For)), default=None)
    if previous is None:
        return None
    q, dtype = deviations.q, deviations.g.dtype
    shift = k.Var(f"{q.name}_shift", dtype)
    shifted_sum, squares, d = (k.Var(f"{q.name}_{tag}", dt.float64) for tag in ("d1", "d2", "d"))
    zero = k.Const(0.0, dt.float64)
    sums = (k.Let(d, k.Cast(k.Binary("sub", deviations.g, shift, dtype), dt.float64)),
            k.Assign(shifted_sum, k.Binary("reduce_add", shifted_sum, d, dt.float64)),
            k.Assign(squares, k.Binary("reduce_add", squares, k.Binary("mul", d, d, dt.float64), dt.float64)))
    body = tuple(s for s in _others(deviations) if not isinstance(s, k.Assign) or s.var != q)
    loop = _with_innermost(stmts[position], body + sums)
    start = (k.Let(shift, _first_element(deviations)), k.Let(shifted_sum, zero), k.Let(squares, zero))
    between = [s for s in stmts[previous + 1:position] if not (isinstance(s, k.Let) and s.var == q)]
    moved = _reading(between, {s.var for s in walk((stmts[previous],)) if isinstance(s, k.Assign)})
    assigned = {s.var for s in walk((loop,)) if isinstance(s, (k.Assign, k.Let))}
    moved_vars = {s.var for s in moved if isinstance(s, k.Let)}
    stored = {s.param.name for s in moved if isinstance(s, k.Store)}
    loaded = {e.param.name for e in _reads(loop) if isinstance(e, k.Load)}
    if any(_reads(s) & assigned for s in moved) or _reads(loop) & moved_vars or stored & loaded:
        return None
    stay = [s for s in between if all(s is not x for x in moved)]
    return (*stmts[:previous + 1], *stay, *start, loop, *moved, _variance(deviations, shift, shifted_sum, squares),
            *stmts[position + 1:])


def _reading(stmts: list[k.Stmt], results: set[k.Var]) -> list[k.Stmt]:
    """The statements that read `results`, directly or through the definitions among them."""
    found = []
    for s in stmts:
        if _reads(s) & results:
            found.append(s)
            if isinstance(s, k.Let):
                results = results | {s.var}
    return found


def _others(deviations: _Deviations) -> tuple[k.Stmt, ...]:
    """The deviation pass's innermost statements without the definitions only its sum reads."""
    kept = list(deviations.nest[-1].body)
    while True:
        read = {e for st in kept if st is not deviations.fold for e in _reads(st)}
        unused = [st for st in kept if isinstance(st, k.Let) and st.var not in read]
        if not unused:
            return tuple(kept)
        kept = [st for st in kept if st not in unused]


def _with_innermost(loop: k.For, body: tuple[k.Stmt, ...]) -> k.For:
    if len(loop.body) == 1 and isinstance(loop.body[0], k.For):
        return dataclasses.replace(loop, body=(_with_innermost(loop.body[0], body),))
    return dataclasses.replace(loop, body=body)


def _count(nest: list[k.For]) -> k.Expr:
    """The number of elements of the nest, in float64."""
    total = None
    for level in nest:
        extent = k.Binary("maximum", k.Binary("sub", level.end, level.begin, level.end.dtype),
                          k.Const(0, level.end.dtype), level.end.dtype)
        extent = k.Cast(extent, dt.float64)
        total = extent if total is None else k.Binary("mul", total, extent, dt.float64)
    return total


def _first_element(deviations: _Deviations) -> k.Expr:
    """The element the nest folds first (every index at its loop's start), or 0 for an empty nest
    (the element is then never read: `where` evaluates one side)."""
    nest = deviations.nest
    value = substituted(deviations.g, {level.var: level.begin for level in nest})
    return k.Ternary("where", _nonempty(nest), value, k.Const(0.0, value.dtype), value.dtype)


def _nonempty(nest: list[k.For]) -> k.Expr:
    test = None
    for level in nest:
        lt = k.Binary("lt", level.begin, level.end, dt.bool_)
        test = lt if test is None else k.Binary("logical_and", test, lt, dt.bool_)
    return test


def _variance(deviations: _Deviations, shift: k.Var, shifted_sum: k.Var, squares: k.Var) -> k.Let:
    """q = d2 - 2 (m - k) d1 + N (m - k)^2, at least 0 (rounding), and 0 for an empty nest (where m
    may be a NaN)."""
    f64 = dt.float64
    c = k.Binary("sub", k.Cast(deviations.m, f64), k.Cast(shift, f64), f64)
    twice = k.Binary("mul", k.Const(2.0, f64), k.Binary("mul", c, shifted_sum, f64), f64)
    spread = k.Binary("mul", _count(deviations.nest), k.Binary("mul", c, c, f64), f64)
    q = k.Binary("maximum", k.Binary("add", k.Binary("sub", squares, twice, f64), spread, f64), k.Const(0.0, f64), f64)
    q = k.Ternary("where", _nonempty(deviations.nest), q, k.Const(0.0, f64), f64)
    return k.Let(deviations.q, k.Cast(q, deviations.q.dtype))
