"""Random words four at a time in a 16-byte row loop (CUDA).

`bz.ops.rand` draws element q of a tensor from word q % 4 of Philox block q // 4 (braze/lower/random.py),
so an element that computes its own word computes a whole 10-round block for one word of it: four
times the work. In a 16-byte loop the four elements of an iteration are neighbours along the row;
where their counters are too (the counter is the loop index plus a value fixed for the row, as a
dropout mask's flat index is), the iteration computes the four words with one block
(`bz_philox_run` in the prelude; two blocks when the first counter is not a multiple of 4) and each
element takes its own word: the same words, so the same numbers, bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from braze.codegen.cuda_plan import exprs_of, sub_exprs, walk
from braze.kir import nodes as k


@dataclass(frozen=True)
class PhiloxRun:
    """Four neighbouring words of one stream: `counter` is the word's position for the loop's element."""

    seed: k.Expr
    offset: k.Expr
    counter: k.Expr  # with the loop's own definitions replaced by their values


def philox_runs(loop: k.For, skip: set[k.Expr]) -> dict[k.Philox, PhiloxRun]:
    """The loop's Philox words (outside the expressions of `skip`, which a row cache holds) that are
    word c % 4 of block c // 4 for a counter c stepping by one with the loop index."""
    lets = {s.var: s.value for s in loop.body if isinstance(s, k.Let)}
    runs = {}
    for node in _philox_nodes(loop.body, skip):
        counter = _rand_counter(node)
        if counter is None:
            continue
        counter, seed, offset = (_inlined(e, lets) for e in (counter, node.seed, node.offset))
        fixed = not any(loop.var in set(sub_exprs(e)) or _reads_memory(e) for e in (seed, offset))
        if fixed and not _reads_memory(counter) and _steps_with(counter, loop.var):
            runs[node] = PhiloxRun(seed, offset, counter)
    return runs


def _philox_nodes(stmts: tuple[k.Stmt, ...], skip: set[k.Expr]) -> Iterator[k.Philox]:
    seen: set[k.Expr] = set()

    def visit(e: k.Expr) -> Iterator[k.Philox]:
        if e in seen or e in skip:
            return
        seen.add(e)
        if isinstance(e, k.Philox):
            yield e
        for child in _children(e):
            yield from visit(child)

    for s in walk(stmts):
        for root in exprs_of(s):
            yield from visit(root)


def _children(e: k.Expr) -> Iterator[k.Expr]:
    for name in getattr(e, "__dataclass_fields__", {}):
        value = getattr(e, name)
        yield from (v for v in (value if isinstance(value, tuple) else (value,)) if isinstance(v, k.Expr))


def _rand_counter(word: k.Philox) -> k.Expr | None:
    """c when `word` is word c % 4 of counter group c // 4, as rand draws element c."""
    group, index = word.group, word.word
    four = lambda e: isinstance(e, k.Const) and e.value == 4  # noqa: E731
    if isinstance(group, k.Binary) and isinstance(index, k.Binary) \
            and (group.op, index.op) == ("floordiv", "remainder") and group.a == index.a and four(group.b) \
            and four(index.b):
        return group.a
    return None


def _inlined(e: k.Expr, lets: dict[k.Var, k.Expr]) -> k.Expr:
    for var in [v for v in sub_exprs(e) if isinstance(v, k.Var) and v in lets]:
        e = k.substitute(e, var, _inlined(lets[var], lets))
    return e


def _reads_memory(e: k.Expr) -> bool:
    return any(isinstance(x, (k.Load, k.LoadLocal)) for x in sub_exprs(e))


def _steps_with(e: k.Expr, var: k.Var) -> bool:
    """Whether `e` is `var` plus a value `var` does not change, through integer adds, subtractions and
    widening casts (index arithmetic does not wrap: engine.index_type picks a type every index fits)."""
    if e == var:
        return True
    if isinstance(e, k.Cast):
        return e.dtype.is_integer and e.x.dtype.is_integer and e.dtype.itemsize >= e.x.dtype.itemsize \
            and _steps_with(e.x, var)
    if isinstance(e, k.Binary) and e.op in ("add", "sub") and e.dtype.is_integer:
        a_fixed, b_fixed = (var not in set(sub_exprs(x)) for x in (e.a, e.b))
        return b_fixed and _steps_with(e.a, var) or e.op == "add" and a_fixed and _steps_with(e.b, var)
    return False
