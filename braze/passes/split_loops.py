"""Index-set splitting: a loop whose body branches on where its index lies becomes consecutive loops,
one for each part of its range, with the branch resolved in each.

cat and pad lower to statements such as `if j < 64: v = x[j + 64] else: v = x[j - 64]`
(braze/lower/values.py: RoPE's rotate_half), a branch per element. Split at 64, the loop is two
branch-free loops, `for j in [0, 64): v = x[j + 64]` and `for j in [64, 128): v = x[j - 64]`: the
CPU's LLVM vectorizes each, and each takes the GPU's 16-byte path (codegen/cuda_plan.py,
vector_accesses), which a loop with a branch does not.

What the pass looks at:
- conditions: those of `if` statements and `where` selects, through `and`, `or`, `not` and the
  loop's own definitions (`Let`s never assigned again);
- in them, comparisons (<, <=, >, >=, ==, !=) of `j + o` or `o - j` with a value `c`, where `j` is
  the loop's index (or it widened by an integer cast), and `o` and `c` are integer expressions the
  host can evaluate (constants, extents and their arithmetic: kir/python.py). Such a comparison has
  one value below a cut `d` and another from it on (== and !=: below d, at d, above d);
- loops of step 1 that carry nothing from one iteration to the next but memory (no assignment to a
  variable defined outside the loop, no atomic, barrier, break or local array). Splitting keeps the
  order of the iterations, and each part is a loop of its own, so the GPU's lanes share each part as
  they shared the whole; a reduction loop, whose lanes combine their partial results after it, is
  left alone.

A loop over [begin, end) split at `d` runs over [begin, D) and [D, end) with D = min(max(d, begin),
end), so a cut outside the range leaves a part empty. A part resolves every comparison its range
decides: those with the same cuts, and those whose cuts differ from a bound of the part by a
constant (`j < n - 1` in a part below `n - 2`). Parts are split again while comparisons remain,
all of them or none: a loop that would take more than MAX_PIECES parts or GROWTH times its
statements stays whole (a loop left with some of its branches gains no vectorized path), so code
and compile time stay linear in the fusion. Parts with constant, empty bounds are dropped; the
variables of every part but the first are renamed, so each name is still defined once in the
kernel. A cut assumes `j + o` does not wrap around, as no index of a fusion does (its index type
holds every index: engine.index_type).

Loops nested in a loop are split after it, in each of its parts. `BRAZE_DISABLE=split_loops` turns
the pass off.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from braze import config
from braze import dtypes as dt
from braze.kir import nodes as k
from braze.kir.python import evaluable, scalar_by_name
from braze.passes.simplify import apply_identities, fold_constants, map_children, simplify_expr

MAX_PIECES = 8  # parts one loop may become
GROWTH = 4  # the most statements its parts may hold together, as a multiple of the loop's own

_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
# For `j op d`: the cut (d + 0 or d + 1), and the comparison's value below it and from it on.
_ONE_CUT = {"lt": (0, (True, False)), "le": (1, (True, False)), "gt": (1, (False, True)), "ge": (0, (False, True))}
_TWO_CUTS = {"eq": (False, True, False), "ne": (True, False, True)}  # below d, at d, above d
_LOGICAL = ("logical_and", "logical_or", "logical_not")
_BODIES = {k.If: ("then", "orelse"), k.For: ("body",), k.While: ("body",)}
_EXPRESSIONS = {k.Let: ("value",), k.Assign: ("value",), k.Store: ("indices", "value"),
                k.StoreLocal: ("index", "value"), k.AtomicRMW: ("indices", "value"), k.If: ("cond",),
                k.For: ("begin", "end"), k.While: ("cond",), k.Assert: ("cond",)}
_DEFINES = {k.Let: "var", k.Assign: "var", k.For: "var"}  # the field naming the variable a statement sets


@dataclass(frozen=True)
class Interval:
    """What is known of the indices of a loop or a part of one: at least each of `lowers`, and
    below each of `uppers` (its bounds, and the cuts it was split at)."""

    lowers: frozenset[k.Expr]
    uppers: frozenset[k.Expr]


def _constant_part(e: k.Expr) -> tuple[k.Expr | None, int]:
    """`e` as (x, c) with e = x + c and c an integer constant (x None: e is the constant)."""
    if isinstance(e, k.Const):
        return None, int(e.value)
    if isinstance(e, k.Binary) and e.op == "add" and isinstance(e.b, k.Const):
        return e.a, int(e.b.value)
    return e, 0


def _at_least(a: k.Expr, b: k.Expr) -> bool:
    """Whether a >= b is known: they differ by a constant (n - 1 and n - 2, say)."""
    (x, c), (y, d) = _constant_part(a), _constant_part(b)
    return x == y and c >= d


@dataclass(frozen=True)
class Comparison:
    """A comparison of a loop's index with a value fixed for the loop: `cuts`, ascending, cut the
    index range into intervals, and the comparison is `truth[n]` on interval n."""

    expr: k.Expr
    cuts: tuple[k.Expr, ...]
    truth: tuple[bool, ...]

    def value_on(self, part: Interval) -> bool | None:
        """The comparison's value on every index of `part` (None: it may vary there)."""
        above = 0
        for cut in self.cuts:
            if any(_at_least(cut, upper) for upper in part.uppers):
                continue  # every index is below `upper`, so below `cut`
            if not any(_at_least(lower, cut) for lower in part.lowers):
                return None
            above += 1
        return self.truth[above]


# --- what a loop's body says about its index ---------------------------------------------------
def walk(stmts: tuple[k.Stmt, ...]) -> Iterator[k.Stmt]:
    for s in stmts:
        yield s
        for name in _BODIES.get(type(s), ()):
            yield from walk(getattr(s, name))


def _expressions(s: k.Stmt) -> Iterator[k.Expr]:
    for name in _EXPRESSIONS.get(type(s), ()):
        value = getattr(s, name)
        yield from value if isinstance(value, tuple) else (value,)


def _children(e: k.Expr) -> Iterator[k.Expr]:
    for name in e.__dataclass_fields__:
        value = getattr(e, name)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, k.Expr):
                yield v


def splittable(loop: k.For) -> bool:
    """Whether the loop's iterations share no state but memory (see the module docstring)."""
    local = {s.var for s in walk(loop.body) if isinstance(s, (k.Let, k.For))}
    for s in walk(loop.body):
        if isinstance(s, (k.While, k.Break, k.Continue, k.Sync, k.Alloc, k.AtomicRMW, k.StoreLocal)):
            return False
        if isinstance(s, k.Assign) and s.var not in local:
            return False
    return loop.step == 1


def _cast(e: k.Expr, dtype: dt.DType) -> k.Expr:
    """`e` as an integer `dtype` (only ever widened here, or narrowed back to a bound's type)."""
    if e.dtype == dtype:
        return e
    return k.Const(int(e.value), dtype) if isinstance(e, k.Const) else k.Cast(e, dtype)


def _plus(a: k.Expr, b: k.Expr) -> k.Expr:
    return simplify_expr(k.Binary("add", a, b, a.dtype))


def _minus(a: k.Expr, b: k.Expr) -> k.Expr:
    if isinstance(b, k.Const):  # a + (-b): the constant then joins those of a
        return _plus(a, k.Const(-b.value, b.dtype))
    return simplify_expr(k.Binary("sub", a, b, a.dtype))


class LoopIndex:
    """The comparisons of one loop's index in its body's conditions. `fixed`: the kernel's
    variables never assigned after their one `Let`, whose definitions may stand for them."""

    def __init__(self, loop: k.For, fixed: set[k.Var]) -> None:
        self.var = loop.var
        self.definitions = {s.var: s.value for s in walk(loop.body) if isinstance(s, k.Let) and s.var in fixed}
        self._expanded: dict[k.Expr, k.Expr] = {}
        self._on_host: dict[k.Expr, k.Expr | None] = {}
        self._linear: dict[k.Expr, tuple[int, k.Expr] | None] = {}

    def expanded(self, e: k.Expr) -> k.Expr:
        """`e` with the loop's own definitions replaced by their values."""
        done = self._expanded.get(e)
        if done is None:
            done = self.expanded(self.definitions[e]) if e in self.definitions else map_children(e, self.expanded)
            self._expanded[e] = done
        return done

    def on_host(self, e: k.Expr) -> k.Expr | None:
        """`e` as the host can evaluate it (so it is the same for every index), or None."""
        if e not in self._on_host:
            value = self.expanded(e)
            self._on_host[e] = value if value.dtype.is_integer and evaluable(value, scalar_by_name) else None
        return self._on_host[e]

    def linear(self, e: k.Expr) -> tuple[int, k.Expr] | None:
        """(s, o) when `e` is `s * j + o` with s = 1 or -1 and `o` on the host, else None."""
        if e not in self._linear:
            self._linear[e] = self._linear_form(e) if e.dtype.is_integer else None
        return self._linear[e]

    def _linear_form(self, e: k.Expr) -> tuple[int, k.Expr] | None:
        if e == self.var:
            return 1, k.Const(0, e.dtype)
        if e in self.definitions:
            return self.linear(self.definitions[e])
        if isinstance(e, k.Cast) and e.x.dtype.is_integer and e.dtype.itemsize >= e.x.dtype.itemsize:
            form = self.linear(e.x)  # a widening cast keeps every value
            return None if form is None else (form[0], _cast(form[1], e.dtype))
        if isinstance(e, k.Unary) and e.op == "neg":
            form = self.linear(e.x)
            return None if form is None else (-form[0], _minus(k.Const(0, e.dtype), form[1]))
        if not (isinstance(e, k.Binary) and e.op in ("add", "sub")):
            return None
        combine = _plus if e.op == "add" else _minus
        left = self.linear(e.a)
        if left is not None and (b := self.on_host(e.b)) is not None:
            return left[0], combine(left[1], b)
        right = self.linear(e.b)
        if right is not None and (a := self.on_host(e.a)) is not None:
            return (right[0] if e.op == "add" else -right[0]), combine(a, right[1])
        return None

    def comparison(self, e: k.Expr) -> Comparison | None:
        """`e` as a Comparison of the index, when it is one."""
        if not (isinstance(e, k.Binary) and e.op in _MIRROR and e.a.dtype == e.b.dtype and e.a.dtype.is_integer):
            return None
        for side, other, op in ((e.a, e.b, e.op), (e.b, e.a, _MIRROR[e.op])):
            form, value = self.linear(side), self.on_host(other)
            if form is None or value is None:
                continue
            sign, offset = form  # s*j + o op c: j op c - o, or (s = -1) j mirror(op) o - c
            d, op = (_minus(value, offset), op) if sign > 0 else (_minus(offset, value), _MIRROR[op])
            if op in _TWO_CUTS:
                return Comparison(e, (d, _plus(d, k.Const(1, d.dtype))), _TWO_CUTS[op])
            step, truth = _ONE_CUT[op]
            return Comparison(e, (_plus(d, k.Const(step, d.dtype)),), truth)
        return None

    def comparisons(self, body: tuple[k.Stmt, ...]) -> list[Comparison]:
        """The comparisons of the index in the conditions of `body`, in program order."""
        found: dict[k.Expr, Comparison] = {}
        seen: set[k.Expr] = set()

        def condition(e: k.Expr) -> None:
            if e in seen:
                return
            seen.add(e)
            if e in self.definitions:
                condition(self.definitions[e])
            elif isinstance(e, (k.Binary, k.Unary)) and e.op in _LOGICAL:
                for c in _children(e):
                    condition(c)
            elif (comparison := self.comparison(e)) is not None:
                found.setdefault(e, comparison)

        visited: set[k.Expr] = set()
        for s in walk(body):
            if isinstance(s, k.If):
                condition(s.cond)
            for select in _selects(_expressions(s), visited):
                condition(select.a)
        return list(found.values())


def _selects(roots: Iterator[k.Expr], seen: set[k.Expr]) -> Iterator[k.Ternary]:
    """The `where` nodes below the roots not in `seen` (which collects what was visited)."""
    stack = list(roots)
    while stack:
        e = stack.pop()
        if e in seen:
            continue
        seen.add(e)
        if isinstance(e, k.Ternary) and e.op == "where":
            yield e
        stack.extend(_children(e))


# --- a part of a loop, its comparisons resolved -------------------------------------------------
class Resolver:
    """A loop body with some expressions known: the comparisons a part decides (as constants) and
    the body's own variables (renamed in every part but the first). Constants are folded, an `if`
    on a known condition becomes the branch taken, and a definition that became a constant is
    substituted into its uses."""

    def __init__(self, known: dict[k.Expr, k.Expr], fixed: set[k.Var]) -> None:
        self.memo: dict[k.Expr, k.Expr] = dict(known)
        self.fixed = fixed
        self._reads: dict[k.Expr, frozenset[k.Var]] = {}

    def reads(self, e: k.Expr) -> frozenset[k.Var]:
        """The variables `e` reads that are not `fixed` (a select's variable: few, whatever the DAG)."""
        found = self._reads.get(e)
        if found is None:
            found = frozenset({e}) if isinstance(e, k.Var) and e not in self.fixed else \
                frozenset().union(*map(self.reads, _children(e)))
            self._reads[e] = found
        return found

    def expr(self, e: k.Expr) -> k.Expr:
        done = self.memo.get(e)
        if done is None:
            rebuilt = map_children(e, self.expr)
            done = e if rebuilt is e else _fold(rebuilt)
            self.memo[e] = done
        return done

    def block(self, stmts: tuple[k.Stmt, ...]) -> tuple[k.Stmt, ...]:
        out: list[k.Stmt] = []
        self.extend(out, stmts)
        return tuple(out)

    def extend(self, out: list[k.Stmt], stmts: tuple[k.Stmt, ...]) -> None:
        """Appends the resolved `stmts` to `out` (a branch taken joins the block around it)."""
        for s in stmts:
            if isinstance(s, k.If) and isinstance(cond := self.expr(s.cond), k.Const):
                self.extend(out, s.then if cond.value else s.orelse)
            elif isinstance(s, k.Let) and s.var in self.fixed and isinstance(value := self.expr(s.value), k.Const):
                self.memo[s.var] = value  # every use of it is in this body, after it
            elif isinstance(s, k.Assign) and out and isinstance(out[-1], k.Let) and out[-1].var == self.expr(s.var) \
                    and out[-1].var not in self.reads(self.expr(s.value)):
                out[-1] = k.Let(out[-1].var, self.expr(s.value))  # the value it replaces is never read
            else:
                out.append(self.stmt(s))

    def stmt(self, s: k.Stmt) -> k.Stmt:
        changes = {}
        for name in _EXPRESSIONS.get(type(s), ()):
            value = getattr(s, name)
            changes[name] = tuple(map(self.expr, value)) if isinstance(value, tuple) else self.expr(value)
        for name in _BODIES.get(type(s), ()):
            changes[name] = self.block(getattr(s, name))
        if type(s) in _DEFINES:
            changes[_DEFINES[type(s)]] = self.expr(getattr(s, _DEFINES[type(s)]))
        return dataclasses.replace(s, **changes) if changes else s


def _fold(e: k.Expr) -> k.Expr:
    folded = fold_constants(e)
    return folded if folded is not e else apply_identities(e)


def _size(stmts: tuple[k.Stmt, ...]) -> int:
    return sum(1 for _ in walk(stmts))


def _empty(begin: k.Expr, end: k.Expr) -> bool:
    return begin == end or isinstance(begin, k.Const) and isinstance(end, k.Const) and begin.value >= end.value


def _clamp(cut: k.Expr, begin: k.Expr, end: k.Expr) -> k.Expr:
    """`min(max(cut, begin), end)` in the type of the bounds, without the `min` or `max` where the
    order is known. (Without the `min`, a cut of an empty range, begin > end, may pass its end: the
    part below it is empty all the same, and every later one ends at `end`.)"""
    low, high = _cast(begin, cut.dtype), _cast(end, cut.dtype)
    if _at_least(cut, high):
        return end
    if _at_least(low, cut):
        return begin
    clamped = cut if _at_least(cut, low) else k.Binary("maximum", cut, low, cut.dtype)
    if not _at_least(high, cut):
        clamped = k.Binary("minimum", clamped, high, cut.dtype)
    return simplify_expr(_cast(simplify_expr(clamped), begin.dtype))


class LoopSplitter:
    """Splits the loops of one kernel. `fixed`: its variables never assigned after their one `Let`;
    `taken`: the names in use, for the renamed variables of the parts."""

    def __init__(self, fixed: set[k.Var], taken: set[str]) -> None:
        self.fixed, self.taken = fixed, taken
        self.roots: dict[str, str] = {}  # a renamed variable's name -> the name it was renamed from

    def renamed(self, var: k.Var) -> k.Var:
        """A new variable for `var` in a part: `j4` becomes `j4_p1`, then `j4_p2`..."""
        root = self.roots.get(var.name, var.name)
        n = 1
        while f"{root}_p{n}" in self.taken:
            n += 1
        new = k.Var(f"{root}_p{n}", var.dtype)
        self.taken.add(new.name)
        self.roots[new.name] = root
        if var in self.fixed:
            self.fixed.add(new)
        return new

    def split_at(self, loop: k.For, within: Interval, chosen: Comparison, comparisons: list[Comparison]
                 ) -> list[tuple[k.For, Interval]]:
        """The loop (its indices `within`) as consecutive parts cut where `chosen` changes, each with
        the comparisons it decides resolved (parts with constant, empty bounds left out)."""
        bounds = [loop.begin]
        for cut in chosen.cuts:
            bounds.append(_clamp(cut, bounds[-1], loop.end))
        bounds.append(loop.end)
        defined = dict.fromkeys([loop.var, *(s.var for s in walk(loop.body) if isinstance(s, (k.Let, k.For)))])
        parts: list[tuple[k.For, Interval]] = []
        for n, (begin, end) in enumerate(zip(bounds, bounds[1:])):
            if _empty(begin, end):
                continue
            # Clamped into the loop's range, a part's indices are still at least the cut below it
            # and below the cut above it (or there are none).
            part = Interval(within.lowers | set(chosen.cuts[max(n - 1, 0):n]),
                            within.uppers | set(chosen.cuts[n:n + 1]))
            known: dict[k.Expr, k.Expr] = {c.expr: k.Const(value, dt.bool_) for c in comparisons
                                           if (value := c.value_on(part)) is not None}
            if parts:  # the first part keeps the loop's names
                known.update({var: self.renamed(var) for var in defined})
            resolver = Resolver(known, self.fixed)
            parts.append((dataclasses.replace(loop, var=resolver.expr(loop.var), begin=begin, end=end,
                                              body=resolver.block(loop.body)), part))
        return parts

    def split_loop(self, loop: k.For) -> list[k.For]:
        """The loop as consecutive parts that decide every comparison of its index it holds; the loop
        itself when it holds none, or when that takes more than MAX_PIECES parts or GROWTH times its
        statements."""
        if not splittable(loop):
            return [loop]
        pending = [(loop, Interval(frozenset({loop.begin}), frozenset({loop.end})))]
        done: list[k.For] = []
        while pending:
            part, within = pending.pop(0)
            comparisons = LoopIndex(part, self.fixed).comparisons(part.body)
            if not comparisons:
                done.append(part)
                continue
            if len(done) + len(pending) + 1 + len(comparisons[0].cuts) > MAX_PIECES:
                return [loop]
            pending[:0] = self.split_at(part, within, comparisons[0], comparisons)
        if sum(_size(part.body) for part in done) > GROWTH * _size(loop.body):
            return [loop]
        return done

    def block(self, stmts: tuple[k.Stmt, ...]) -> tuple[k.Stmt, ...]:
        """`stmts` with their loops split, then the loops inside each part."""
        out: list[k.Stmt] = []
        for s in stmts:
            for part in self.split_loop(s) if isinstance(s, k.For) else [s]:
                changes = {name: self.block(getattr(part, name)) for name in _BODIES.get(type(part), ())}
                out.append(dataclasses.replace(part, **changes) if changes else part)
        return tuple(out)


def split_loops(kernel: k.Kernel) -> k.Kernel:
    """`kernel` with its loops split where conditions on their index change (see the module)."""
    if config.disabled("split_loops"):
        return kernel
    statements = [s for t in kernel.tasks for s in walk(t.body)]
    assigned = {s.var for s in statements if isinstance(s, k.Assign)}
    assigned |= {s.result for s in statements if isinstance(s, k.AtomicRMW) and s.result is not None}
    defined = Counter(s.var for s in statements if isinstance(s, k.Let))
    fixed = {var for var, count in defined.items() if count == 1 and var not in assigned}
    taken = {p.name for p in kernel.params} | {t.var.name for t in kernel.tasks if t.var is not None}
    taken |= {s.var.name for s in statements if isinstance(s, (k.Let, k.For, k.Alloc))}
    splitter = LoopSplitter(fixed, taken)
    # A tile task keeps its two loops: the GPU stages each tile through shared memory around them.
    tasks = tuple(t if t.tile else dataclasses.replace(t, body=splitter.block(t.body)) for t in kernel.tasks)
    return dataclasses.replace(kernel, tasks=tasks)
