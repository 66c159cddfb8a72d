"""Task fusion (docs/architecture.md, "Task fusion"): adjacent `range_for` tasks merge into one launch
when provably race-free.

Two tasks A then B run as one loop whose thread `t` runs A's body then B's body for index `t`.
That is only the same program when no thread can see another thread's part of A from B:

1. A and B have the same bounds (their begin/end read only constants, scalar parameters and
   extents, none of which a task can write).
2. Every global access is attributed to a resource (an array parameter).
3. Each resource touched by both tasks and written by one of them is accessed, everywhere in
   both bodies, at one and the same address fingerprint, and that fingerprint is injective in
   the loop index and not indirect: thread `t` owns its elements. For arrays of several
   dimensions the fingerprint is the owner coordinate: one index, injective in the loop index,
   that every access shares (`v[i, 0]` and `v[i, 1]` are both owned by thread i); the other
   indices may be anything but indirect.

Anything the analysis does not recognise rejects the pair, so the pass can only change speed.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from braze import config
from braze.kir import nodes as k
from braze.passes.simplify import _subexpressions, map_children, simplify_expr

# --- decisions ----------------------------------------------------------------------------------
FUSED_DISJOINT = "disjoint"
FUSED_RAW = "same-thread read-after-write"
REJECT_SERIAL = "serial task"
REJECT_BOUNDS = "different bounds"
REJECT_UNRECOGNISED = "unrecognised construct"
REJECT_INDIRECT = "indirect index"
REJECT_NOT_INJECTIVE = "non-injective index"
REJECT_ADDRESSES = "different addresses"
REJECT_SCHEDULE = "different backend schedules"
REJECT_ATOMIC = "atomic on shared array"
REJECT_RAW_OFF = "read-after-write rule off"
REJECT_BUDGET = "size budget"


@dataclass(frozen=True)
class Decision:
    """What the pass decided for one adjacent pair of tasks."""

    kernel: str
    first: str
    second: str
    fused: bool
    reason: str  # one of the FUSED_* / REJECT_* categories
    detail: str = ""

    def line(self) -> str:
        verdict = "fused" if self.fused else "rejected"
        detail = f" ({self.detail})" if self.detail else ""
        return f"fuse_tasks {self.kernel}: {self.first} + {self.second}: {verdict}: {self.reason}{detail}"


class _Reject(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason, self.detail = reason, detail


# --- generic traversal of Kernel IR nodes ---------------------------------------------------------
_NODE_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(node) -> tuple[str, ...]:
    """The node's field names, read once per class (dataclasses.fields builds a tuple every call)."""
    names = _NODE_FIELDS.get(type(node))
    if names is None:
        names = _NODE_FIELDS[type(node)] = tuple(f.name for f in dataclasses.fields(node))
    return names


def _children(node) -> Iterator:
    for name in _fields(node):
        value = getattr(node, name)
        if isinstance(value, tuple):
            yield from (v for v in value if isinstance(v, (k.Expr, k.Stmt)))
        elif isinstance(value, (k.Expr, k.Stmt)):
            yield value


def _walk(node) -> Iterator:
    """The node and everything under it: every statement, and each distinct expression once. An
    expression used twice is one node of the Kernel IR DAG; what the walkers here ask (which
    accesses, locals and constructs occur) does not depend on how often a walk meets it, and a
    chain of shared values has exponentially many paths."""
    seen: set[k.Expr] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, k.Expr):
            if n in seen:
                continue
            seen.add(n)
        yield n
        stack.extend(reversed(tuple(_children(n))))


def _map(node, fn: Callable, memo: dict | None = None):
    """Rebuilds `node` bottom-up, letting `fn` (a function of the node alone) replace each rebuilt
    node; each distinct expression is rebuilt once."""
    memo = {} if memo is None else memo
    if isinstance(node, k.Expr) and node in memo:
        return memo[node]
    changes = {}
    for name in _fields(node):
        value = getattr(node, name)
        if isinstance(value, tuple) and any(isinstance(v, (k.Expr, k.Stmt)) for v in value):
            changes[name] = tuple(_map(v, fn, memo) if isinstance(v, (k.Expr, k.Stmt)) else v for v in value)
        elif isinstance(value, (k.Expr, k.Stmt)):
            changes[name] = _map(value, fn, memo)
    rebuilt = dataclasses.replace(node, **changes) if changes else node
    result = fn(rebuilt)
    if isinstance(node, k.Expr):
        memo[node] = result
    return result


# What the merge asks of a statement (each a walk of it), remembered per statement under
# `remembered_walks()`: a GPU plan tries the merge on every pair of column tasks it considers
# (engine._merged_row_tasks), each time over the same loops, and the merge scans its body again
# after each join. GPT-2-small's backward took 700,000 walks there, most of its first step's compile
# on the main thread. A pair's merge (`_merge`) and a task's sibling loops joined are remembered the
# same way: the plan asks of a trial merge, then of the task fuse_tasks makes of the same pair.
# Kernel IR is immutable, so a node's answers never change; the nodes asked about are kept with the
# answer, so their ids name no others while the memo lives.
_WALKS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("fuse_tasks_walks", default=None)


@contextlib.contextmanager
def remembered_walks():
    """Within it, each statement's answers to the merge's questions are computed once, and each
    pair of tasks is merged once."""
    token = _WALKS.set(_WALKS.get() if _WALKS.get() is not None else {})
    try:
        yield
    finally:
        _WALKS.reset(token)


def _remembered(question: Callable[..., object]) -> Callable[..., object]:
    @functools.wraps(question)
    def ask(*nodes: object) -> object:
        memo = _WALKS.get()
        if memo is None:
            return question(*nodes)
        key = (question, *map(id, nodes))
        if key not in memo:
            memo[key] = (nodes, question(*nodes))
        return memo[key][1]
    return ask


def body_size(body: tuple[k.Stmt, ...]) -> int:
    """Kernel IR nodes in a task body, an expression counted at each use (as its text repeats it):
    the cost guard's measure of a merged body. Each distinct expression's count is taken once."""
    sizes: dict[k.Expr, int] = {}

    def size(node) -> int:
        if isinstance(node, k.Expr) and node in sizes:
            return sizes[node]
        total = 1 + sum(size(child) for child in _children(node))
        if isinstance(node, k.Expr):
            sizes[node] = total
        return total

    return sum(size(s) for s in body)


# --- accesses and their address fingerprints -------------------------------------------------------
@dataclass(frozen=True)
class Access:
    resource: str
    writes: bool
    atomic: bool
    fingerprint: tuple[k.Expr, ...]  # the indices with single-assignment locals substituted
    text: str


_KNOWN_STMTS = (k.Let, k.Assign, k.Store, k.StoreLocal, k.AtomicRMW, k.If, k.For, k.While, k.Break, k.Continue,
                k.Assert)
_KNOWN_EXPRS = (k.Const, k.Var, k.ScalarRef, k.ArrayExtent, k.ArrayStride, k.Load, k.LoadLocal, k.Unary, k.Binary,
                k.Ternary, k.Cast, k.Philox)


def _single_assignment_defs(body: tuple[k.Stmt, ...]) -> dict[k.Var, k.Expr]:
    """Locals defined once by `Let` and never changed after: their uses can be replaced by the definition."""
    lets: Counter = Counter()
    changed: set[k.Var] = set()
    definition: dict[k.Var, k.Expr] = {}
    for s in (n for stmt in body for n in _walk(stmt)):
        if isinstance(s, k.Let):
            lets[s.var] += 1
            definition[s.var] = s.value
        elif isinstance(s, k.Assign):
            changed.add(s.var)
        elif isinstance(s, (k.For, k.Alloc)):
            changed.add(s.var)
        elif isinstance(s, k.AtomicRMW) and s.result is not None:
            changed.add(s.result)
    return {v: e for v, e in definition.items() if lets[v] == 1 and v not in changed}


class _Substituter:
    def __init__(self, defs: dict[k.Var, k.Expr]) -> None:
        self.defs, self.memo = defs, {}

    def __call__(self, e: k.Expr) -> k.Expr:
        if e not in self.memo:
            self.memo[e] = _map(e, lambda n: self(self.defs[n]) if isinstance(n, k.Var) and n in self.defs else n)
        return self.memo[e]


# Integer ops whose operands may be swapped: the same value either way, wrap-around included.
_COMMUTATIVE = frozenset({"add", "mul", "bitwise_and", "bitwise_or", "bitwise_xor", "minimum", "maximum"})


def normalized(e: k.Expr) -> k.Expr:
    """One form for equivalent index expressions, so that `t + 0`, `t * 1`, `3 + t` and `2 * t` name
    the elements `t`, `t`, `t + 3` and `t * 2` name: constants folded, identities dropped,
    constants on the right, and the operands of commutative integer ops in a fixed order."""
    e = simplify_expr(e)
    return _ordered(e)


def _ordered(e: k.Expr) -> k.Expr:
    e = map_children(e, _ordered)
    if isinstance(e, k.Binary) and e.op in _COMMUTATIVE and e.dtype.is_integer and not isinstance(e.b, k.Const):
        if isinstance(e.a, k.Const) or _text(e.b) < _text(e.a):
            return k.Binary(e.op, e.b, e.a, e.dtype)
    return e


def _kept(task: k.Task, name: str, make: Callable[[k.Task], object]) -> object:
    """`make(task)`, kept on the task: the fixed point asks again of the same task for each pair it
    is in, and a run of merged tasks grows with every merge."""
    found = task.__dict__.get(name)
    if found is None:
        found = make(task)
        object.__setattr__(task, name, found)
    return found


def _collect(task: k.Task) -> list[Access]:
    """Every global access of the task, or _Reject when something cannot be attributed."""
    found = _kept(task, "_fuse_accesses", _accesses_or_reject)
    if isinstance(found, str):
        raise _Reject(found, task.__dict__["_fuse_reject_detail"])
    return list(found)


def _accesses_or_reject(task: k.Task) -> tuple[Access, ...] | str:
    """The task's accesses, or the reason they cannot all be attributed (its detail kept beside)."""
    try:
        return tuple(_collect_accesses(task))
    except _Reject as reject:
        object.__setattr__(task, "_fuse_reject_detail", reject.detail)
        return reject.reason


def _collect_accesses(task: k.Task) -> list[Access]:
    subst = _Substituter(_single_assignment_defs(task.body))
    accesses = []
    for stmt in task.body:
        for node in _walk(stmt):
            if isinstance(node, k.Alloc) and node.memory != "local":
                raise _Reject(REJECT_UNRECOGNISED, f"{node.memory} memory")
            if not isinstance(node, (*_KNOWN_STMTS, *_KNOWN_EXPRS, k.Alloc)):
                raise _Reject(REJECT_UNRECOGNISED, type(node).__name__)
            if task.var in (getattr(node, "var", None), getattr(node, "result", None)) and not isinstance(node, k.Var):
                raise _Reject(REJECT_UNRECOGNISED, "the loop index is assigned")
            if isinstance(node, (k.Load, k.Store, k.AtomicRMW)):
                fingerprint = tuple(normalized(subst(i)) for i in node.indices)
                text = f"{node.param.name}[{', '.join(_text(i) for i in node.indices)}]"
                accesses.append(Access(node.param.name, not isinstance(node, k.Load),
                                       isinstance(node, k.AtomicRMW), fingerprint, text))
    return accesses


def _text(e: k.Expr) -> str:
    from braze.kir.printer import expr

    return expr(e)


# --- injectivity ----------------------------------------------------------------------------------
def _uniform(e: k.Expr) -> bool:
    """The same value in every thread and unchanged by any task (no memory, no locals)."""
    if isinstance(e, (k.Const, k.ScalarRef, k.ArrayExtent, k.ArrayStride)):
        return True
    if isinstance(e, (k.Unary, k.Binary, k.Ternary, k.Cast)):
        return all(_uniform(c) for c in _children(e))
    return False


def _nonzero_const(e: k.Expr) -> bool:
    return isinstance(e, k.Const) and not e.dtype.is_floating and int(e.value) != 0


def _shift_amount(e: k.Expr, x: k.Expr) -> bool:
    return isinstance(e, k.Const) and 0 <= int(e.value) < 8 * x.dtype.itemsize


def _either_side(e: k.Binary, t: k.Var, other_ok: Callable[[k.Expr], bool]) -> bool:
    return injective(e.a, t) and other_ok(e.b) or injective(e.b, t) and other_ok(e.a)


# The whitelist: index forms that keep an injective function of the loop index injective.
_INJECTIVE_BINARY: dict[str, Callable[[k.Binary, k.Var], bool]] = {
    "add": lambda e, t: _either_side(e, t, _uniform),
    "sub": lambda e, t: _either_side(e, t, _uniform),
    "bitwise_xor": lambda e, t: _either_side(e, t, _uniform),
    "mul": lambda e, t: _either_side(e, t, _nonzero_const),
    "left_shift": lambda e, t: injective(e.a, t) and _shift_amount(e.b, e.a),
}
_INJECTIVE_UNARY = ("neg", "bitwise_not")


def injective(e: k.Expr, t: k.Var) -> bool:
    """Whether `e` is an injective function of the loop index `t` (by the whitelist; False when unsure)."""
    if isinstance(e, k.Var):
        return e == t
    if isinstance(e, k.Binary) and e.op in _INJECTIVE_BINARY:
        return _INJECTIVE_BINARY[e.op](e, t)
    if isinstance(e, k.Unary) and e.op in _INJECTIVE_UNARY:
        return injective(e.x, t)
    if isinstance(e, k.Cast):  # bit casts and widening integer casts keep distinct values distinct
        return (e.dtype.is_integer and e.x.dtype.is_integer and e.dtype.itemsize >= e.x.dtype.itemsize
                and injective(e.x, t))
    return False


def _strip_offset(e: k.Expr) -> k.Expr:
    """`lo + x` or `x + lo` -> x for a uniform lo (how `bz.ndrange` offsets its indices)."""
    if isinstance(e, k.Binary) and e.op == "add":
        if _uniform(e.a):
            return e.b
        if _uniform(e.b):
            return e.a
    return e


def _factors(e: k.Expr) -> Counter:
    """A uniform divisor as the multiset of its factors: `a * b` and `b * a` are one divisor."""
    if isinstance(e, k.Binary) and e.op == "mul":
        return _factors(e.a) + _factors(e.b)
    return Counter([e])


def _nonnegative(e: k.Expr) -> bool:
    """An extent, a positive constant or `max(x, 0)`: never negative."""
    if isinstance(e, k.Const):
        return int(e.value) > 0
    if isinstance(e, k.Binary) and e.op == "maximum":
        return any(isinstance(x, k.Const) and int(x.value) >= 0 for x in (e.a, e.b))
    return isinstance(e, k.ArrayExtent)


def _digit(e: k.Expr, t: k.Var) -> tuple[frozenset, k.Expr | None] | None:
    """`t // D % M` as (D's factors, M), every factor uniform and never negative; None for other forms.

    `(t // a) // b` is `t // (a * b)`, and `t // M` with `t % M` give t back, for positive divisors.
    Extents and `max(x, 0)` (how `bz.ndrange` sizes its axes) are never negative, and an ndrange
    axis of size zero leaves the task without threads; a scalar divisor could be zero or negative."""
    modulus = None
    if isinstance(e, k.Binary) and e.op == "remainder":
        if not (_nonnegative(e.b) and _uniform(e.b)):
            return None
        e, modulus = e.a, e.b
    divisors: Counter = Counter()
    while isinstance(e, k.Binary) and e.op == "floordiv":
        factors = _factors(e.b)
        if not all(_nonnegative(f) and _uniform(f) for f in factors):
            return None
        divisors += factors
        e = e.a
    return (frozenset(divisors.items()), modulus) if e == t else None


def _recovers_index(digits: set[tuple[frozenset, k.Expr | None]]) -> bool:
    """Whether the digits give back the loop index: `x // M` and `x % M` together give `x`."""
    known = {_divisor(divisors) for divisors, modulus in digits if modulus is None}
    splits = [(_divisor(divisors), _divisor(Counter(dict(divisors)) + Counter([modulus])))
              for divisors, modulus in digits if modulus is not None]
    grew = True
    while grew:
        grew = False
        for part, whole in splits:
            if whole in known and part not in known:
                known.add(part)
                grew = True
    return _divisor(Counter()) in known


def _divisor(factors: frozenset | Counter) -> tuple[int, frozenset]:
    """A divisor's factors with its constants multiplied into one: an ndrange of constant extents
    (6, 6, 6) splits its index as `t // 36`, `t // 6 % 6` and `t % 6`, once constants are folded, and
    36 is 6 * 6. The constants are positive (`_digit` takes no other), so `t // a // b` is `t // (a * b)`."""
    product, rest = 1, Counter()
    for factor, count in Counter(dict(factors)).items():
        if isinstance(factor, k.Const):
            product *= int(factor.value) ** count
        else:
            rest[factor] = count
    return product, frozenset(rest.items())


def _delinearized(indices: tuple[k.Expr, ...], t: k.Var) -> set[tuple]:
    """The owner key of the indices that split t into `bz.ndrange` coordinates, when together they
    are injective in t: `(t // E, t % E)` in 2-d, `(t // (E2 * E1), t // E2 % E1, t % E2)` in 3-d, and so on."""
    digits = {axis: d for axis, index in enumerate(indices)
              if (d := _digit(_strip_offset(index), t)) is not None}
    if not digits or not _recovers_index(set(digits.values())):
        return set()
    axes = tuple(sorted(digits))
    return {(axes, tuple(indices[axis] for axis in axes))}


def owners(access: Access, t: k.Var) -> set[tuple]:
    """The access's owner coordinates: (axis, index) for each index injective in t (and ndrange pairs).

    Thread t touches only elements at that coordinate, and no other thread does; so when every
    access to a resource shares one owner coordinate, each thread owns its part of the resource.
    For a 1-d array the owner coordinate is the whole address fingerprint.
    """
    keys = {(axis, index) for axis, index in enumerate(access.fingerprint) if injective(index, t)}
    return keys | _delinearized(access.fingerprint, t)


def _problem(access: Access, t: k.Var) -> str | None:
    """Why this access's address does not name elements owned by thread t, or None."""
    if any(isinstance(n, (k.Load, k.LoadLocal)) for i in access.fingerprint for n in _walk(i)):
        return REJECT_INDIRECT
    if not owners(access, t):
        return REJECT_NOT_INJECTIVE
    return None


# --- the pair decision ----------------------------------------------------------------------------
def _check_shared(resource: str, accesses: list[Access], t: k.Var) -> None:
    """Every access to a shared, written resource must name the same injective, non-indirect owner."""
    for access in accesses:
        problem = _problem(access, t)
        if problem is not None:
            raise _Reject(REJECT_ATOMIC if access.atomic else problem, access.text)
    common = set.intersection(*(owners(a, t) for a in accesses))
    if not common:
        texts = sorted({a.text for a in accesses})
        atomic = any(a.atomic for a in accesses)
        raise _Reject(REJECT_ATOMIC if atomic else REJECT_ADDRESSES, " vs ".join(texts))


def _jumps_kept_inside(a: k.Task, second: k.Task) -> tuple[k.Stmt, ...]:
    """A's body, ready for B's (`second`, renamed) to follow it: a continue or break at the task's level
    (`if solid[i]: continue`) ends this index's part of A only, so such a body runs inside a loop of one
    trip, which the jump leaves."""
    if not _has_task_level_jump(a.body):
        return a.body
    taken = _kept(a, "_fuse_var_names", _var_names) | _var_names(second)
    name, suffix = f"{a.var.name}_once", 1
    while name in taken:
        name, suffix = f"{a.var.name}_once{suffix}", suffix + 1
    zero, one = k.Const(0, a.var.dtype), k.Const(1, a.var.dtype)
    return (k.For(k.Var(name, a.var.dtype), zero, one, a.body),)


def _has_task_level_jump(body: tuple[k.Stmt, ...]) -> bool:
    """A continue/break outside any serial loop, which would skip the second body if merged as it is."""
    for s in body:
        if isinstance(s, (k.Continue, k.Break)):
            return True
        if isinstance(s, k.If) and (_has_task_level_jump(s.then) or _has_task_level_jump(s.orelse)):
            return True
    return False


def _var_names(task: k.Task) -> frozenset[str]:
    return frozenset(n.name for s in task.body for n in _walk(s) if isinstance(n, k.Var))


def _renamed_second(a: k.Task, b: k.Task) -> k.Task:
    """B's body with its loop index renamed to A's and its locals renamed away from A's names (a
    serial task, a full reduction, has no index)."""
    taken = set(_kept(a, "_fuse_var_names", _var_names)) | ({a.var.name} if a.var is not None else set())
    mapping: dict[k.Var, k.Var] = {b.var: a.var} if b.var is not None else {}
    defined = {n.var if not isinstance(n, k.AtomicRMW) else n.result for s in b.body for n in _walk(s)
               if isinstance(n, (k.Let, k.For, k.Alloc)) or isinstance(n, k.AtomicRMW) and n.result is not None}
    names_in_b = {n.name for s in b.body for n in _walk(s) if isinstance(n, k.Var)}
    for var in sorted(defined, key=lambda v: v.name):
        if var.name in taken:
            suffix = 1
            while f"{var.name}_{suffix}" in taken | names_in_b:
                suffix += 1
            mapping[var] = k.Var(f"{var.name}_{suffix}", var.dtype)
            taken.add(mapping[var].name)
    rename = lambda n: mapping.get(n, n) if isinstance(n, k.Var) else n
    return dataclasses.replace(b, body=tuple(_map(s, rename) for s in b.body), var=a.var)


def _merged_name(a: k.Task, b: k.Task) -> str:
    """`first__last` of the merged run of tasks (names stay short and deterministic across processes)."""
    return f"{a.name.split('__')[0]}__{b.name.split('__')[-1]}"


def _unique_names(tasks: list[k.Task]) -> list[k.Task]:
    """Renames tasks whose name repeats (possible only when original names contain `__`)."""
    seen: set[str] = set()
    out = []
    for position, task in enumerate(tasks):
        if task.name in seen:
            task = dataclasses.replace(task, name=f"{task.name}_{position}")
        seen.add(task.name)
        out.append(task)
    return out


def decide(a: k.Task, b: k.Task, budget: int, raw: bool) -> tuple[str, str]:
    """(fused reason, detail) for tasks A then B, or raises _Reject with the reason."""
    if a.kind != "range_for" or b.kind != "range_for":
        raise _Reject(REJECT_SERIAL)
    if (a.begin, a.end, a.block_dim, a.var.dtype) != (b.begin, b.end, b.block_dim, b.var.dtype):
        raise _Reject(REJECT_BOUNDS, f"[{_text(a.begin)}, {_text(a.end)}) vs [{_text(b.begin)}, {_text(b.end)})")
    # Which arrays B touches and writes, whether its accesses can all be attributed, and its size do
    # not change when its locals are renamed: B's own answers, kept on B, serve every pair it is in.
    # Only the addresses of arrays both share and one writes are compared, renamed into A's names.
    first_accesses, second_accesses = _collect(a), _collect(b)
    touched_first = {x.resource for x in first_accesses}
    touched_second = {x.resource for x in second_accesses}
    written = {x.resource for x in first_accesses + second_accesses if x.writes}
    shared = sorted(touched_first & touched_second & written)
    if shared and not raw:
        raise _Reject(REJECT_RAW_OFF, ", ".join(shared))
    if shared:
        second_accesses = _collect(_renamed_second(a, b))
    for resource in shared:
        _check_shared(resource, [x for x in first_accesses + second_accesses if x.resource == resource], a.var)
    size = _size_of(a) + _size_of(b)
    if size > budget:
        raise _Reject(REJECT_BUDGET, f"{size} nodes > {budget}")
    return (FUSED_RAW, f"on {', '.join(shared)}; {size} nodes") if shared else (FUSED_DISJOINT, f"{size} nodes")


def _size_of(task: k.Task) -> int:
    return _kept(task, "_fuse_size", lambda task: body_size(task.body))


def grouped_by_range(kernel: k.Kernel, kind: Callable[[k.Task], object] = lambda task: None) -> k.Kernel:
    """Each task moved up to just after the last earlier task over the same range and of the same
    `kind` (a backend's schedule of it), past tasks that touch none of its arrays: fuse_tasks merges
    adjacent tasks only, and a model's gradient region interleaves its column sums by width (GPT-2's
    bias gradients: 768, 3072, 768 and 2304 columns a layer, 48 launches) and with row tasks (its
    weight gradients cast to float32). A task sharing an array with one between stays (a norm
    backward's column sum next to the row task that reads the same rows, which may carry it:
    codegen/cuda_inner_outer.py). Moving a task past one it shares no array with assumes no more
    than a merge of the two does: distinct arrays are distinct memory."""
    grouped: list[k.Task] = []
    keys: list[tuple] = []
    for task in kernel.tasks:
        key, at = (_range_of(task), kind(task)), len(grouped)
        for i in range(len(grouped) - 1, -1, -1):
            if keys[i] == key:
                at = i + 1
                break
            if _shares_an_array(grouped[i], task):
                break
        grouped.insert(at, task)
        keys.insert(at, key)
    return kernel if grouped == list(kernel.tasks) else dataclasses.replace(kernel, tasks=tuple(grouped))


def loop_ranges(task: k.Task) -> tuple:
    """The ranges of the loops a task's body nests (each top-level loop's, then its own loops'): two
    tasks with the same ones walk alike, so their loops can become one pass (fuse_sibling_loops)."""
    def ranges(body: tuple[k.Stmt, ...]) -> tuple:
        return tuple((s.begin, s.end, s.step, ranges(s.body)) for s in body if isinstance(s, k.For))
    return ranges(task.body)


def _range_of(task: k.Task) -> tuple:
    return task.kind, task.begin, task.end, task.block_dim, task.var.dtype if task.var is not None else None


def _shares_an_array(a: k.Task, b: k.Task) -> bool:
    return bool(_arrays(a) & _arrays(b))


def _arrays(task: k.Task) -> frozenset[str]:
    """The arrays a task loads from, stores to or applies atomics to (kept on the task: grouping asks
    it of each task for every task it moves past)."""
    return _kept(task, "_fuse_arrays", _touched_arrays)


def writes_apart(a: k.Task, b: k.Task) -> bool:
    """Whether neither task touches an array the other writes."""
    return not (_written_arrays(a) & _arrays(b) or _written_arrays(b) & _arrays(a))


def _written_arrays(task: k.Task) -> frozenset[str]:
    return frozenset(n.param.name for s in task.body for n in _walk(s) if isinstance(n, (k.Store, k.AtomicRMW)))


def _touched_arrays(task: k.Task) -> frozenset[str]:
    return frozenset().union(*(_summary(s).loaded for s in task.body)) | _written_arrays(task)


def merged_task(a: k.Task, b: k.Task) -> k.Task:
    """`a` and then `b` as one task (what fuse_tasks makes of a pair it merges). Under
    `remembered_walks()`, the same task each time it is asked: what a backend found trying the merge
    (its schedule, its sibling loops fused) is kept on the task that fuse_tasks then makes."""
    return _merge(a, b)


@_remembered
def _merge(a: k.Task, b: k.Task) -> k.Task:
    second = _renamed_second(a, b)
    merged = dataclasses.replace(a, name=_merged_name(a, b), body=_jumps_kept_inside(a, second) + second.body)
    _keep_parts(merged, a, b, second)
    memo = _WALKS.get()
    if memo is not None:  # its sibling loops are then fused from where a's ended (_task_with_siblings_fused)
        memo[(_merge, "first", id(merged))] = (merged, a)
    return merged


def _keep_parts(merged: k.Task, a: k.Task, b: k.Task, second: k.Task) -> None:
    """Keeps on a merged task what decide asks of it, from its parts: B's locals are renamed apart
    from A's, so each part's accesses (its single-assignment locals, hence its fingerprints), size
    and names are the same within the merged task as alone. The next pair it is in reads them, not
    a walk of a body that grows with every merge of a run."""
    accesses, rejected = _kept(a, "_fuse_accesses", _accesses_or_reject), a
    if not isinstance(accesses, str):  # the first access the walk of the merged body cannot attribute
        rest, rejected = _kept(second, "_fuse_accesses", _accesses_or_reject), second
        accesses = rest if isinstance(rest, str) else accesses + rest
    if isinstance(accesses, str):
        object.__setattr__(merged, "_fuse_reject_detail", rejected.__dict__["_fuse_reject_detail"])
    object.__setattr__(merged, "_fuse_accesses", accesses)
    object.__setattr__(merged, "_fuse_size", _size_of(a) + _size_of(b))  # renaming keeps the count of nodes
    object.__setattr__(merged, "_fuse_var_names", _kept(a, "_fuse_var_names", _var_names) | _var_names(second))


def fuse_tasks(kernel: k.Kernel, enabled: bool = True, raw: bool = True,
               fits: Callable[[k.Task, k.Task], bool] | None = None) -> tuple[k.Kernel, list[Decision]]:
    """Merges adjacent tasks of `kernel` to a fixed point; returns the new kernel and every pair's decision.
    `raw=False` merges only tasks that share no written array; `fits(a, b)`, where given, must also
    hold (a backend's condition: the schedules it would give the merged task).

    Knobs (braze.config): `fuse_tasks` (kill switch), `fuse_tasks_raw`, `fuse_tasks_budget`, and
    `fuse_tasks_diag`, which prints one line per pair and a count per reason.
    """
    knobs = config.current
    if not (enabled and knobs.fuse_tasks):
        return kernel, []
    if not raw:
        knobs = dataclasses.replace(knobs, fuse_tasks_raw=knobs.fuse_tasks_raw and raw)
    decisions: dict[tuple[str, str], Decision] = {}
    tasks = list(kernel.tasks)
    changed = True
    while changed:
        changed = False
        merged: list[k.Task] = []
        for task in tasks:
            if merged and _try(kernel.name, merged[-1], task, knobs, decisions, fits):
                merged[-1] = _merge(merged[-1], task)
                changed = True
            else:
                merged.append(task)
        tasks = merged
    result = dataclasses.replace(kernel, tasks=tuple(_unique_names(tasks)))
    if knobs.fuse_tasks_diag:
        _print_diagnostics(kernel, result, list(decisions.values()))
    return result, list(decisions.values())


def _try(kernel: str, a: k.Task, b: k.Task, knobs: config.Config, decisions: dict,
         fits: Callable[[k.Task, k.Task], bool] | None = None) -> bool:
    key = (a.name, b.name)
    if key not in decisions:
        try:
            reason, detail = decide(a, b, knobs.fuse_tasks_budget, knobs.fuse_tasks_raw)
            if fits is not None and not fits(a, b):
                raise _Reject(REJECT_SCHEDULE)
            decisions[key] = Decision(kernel, a.name, b.name, True, reason, detail)
        except _Reject as reject:
            decisions[key] = Decision(kernel, a.name, b.name, False, reject.reason, reject.detail)
    return decisions[key].fused


def _print_diagnostics(before: k.Kernel, after: k.Kernel, decisions: list[Decision]) -> None:
    for decision in decisions:
        config.diagnostic(decision.line())
    counts = Counter(("fused: " if d.fused else "rejected: ") + d.reason for d in decisions)
    summary = ", ".join(f"{reason} x{n}" for reason, n in sorted(counts.items()))
    tasks = f"{len(before.tasks)} tasks -> {len(after.tasks)}"
    budget = f"budget {config.current.fuse_tasks_budget} nodes"
    config.diagnostic(f"fuse_tasks {before.name}: {tasks}; {summary or 'no pairs'}; {budget}")


# --- after a merge: a value stored, then read back at the same index, stays in a register -------
def forward_stores(task: k.Task) -> k.Task:
    """A straight-line task (assignments and stores only, as merged elementwise tasks are) whose
    later statements read an element an earlier one stored, at the same indices: the value is kept
    in a variable and read from there, not from memory (a store and a load through pointers that
    may alias cannot be forwarded by the C++ compiler)."""
    if any(not isinstance(s, (k.Let, k.Store)) for s in task.body):
        return task
    read = {(e.param.name, e.indices) for s in task.body for e in _subexpressions(s.value) if isinstance(e, k.Load)}
    if not any(isinstance(s, k.Store) and (s.param.name, s.indices) in read for s in task.body):
        return task
    stored: dict[tuple, k.Var] = {}
    memo: dict[k.Expr, k.Expr] = {}

    def forwarded(e: k.Expr) -> k.Expr:
        if e not in memo:
            found = stored.get((e.param.name, e.indices)) if isinstance(e, k.Load) else None
            memo[e] = found if found is not None else map_children(e, forwarded)
        return memo[e]

    body: list[k.Stmt] = []
    for s in task.body:
        if isinstance(s, k.Let):
            body.append(k.Let(s.var, forwarded(s.value)))
            continue
        value = forwarded(s.value)
        stored = {key: v for key, v in stored.items() if key[0] != s.param.name}  # overwritten
        memo.clear()
        if (s.param.name, s.indices) not in read:
            body.append(k.Store(s.param, s.indices, value))
            continue
        kept = k.Var(f"{s.param.name}_stored{len(body)}", value.dtype)
        body += [k.Let(kept, value), k.Store(s.param, s.indices, kept)]
        stored[(s.param.name, s.indices)] = kept
    return dataclasses.replace(task, body=tuple(body))


# --- sibling loops of one task: one pass over the range where neither reads the other ----------
_NOT_FOLDS = (k.Store, k.AtomicRMW, k.Sync, k.Alloc, k.Break, k.Continue, k.While)
# Statements no loop moves across: a barrier or an atomic orders memory between threads, a jump or an
# assertion decides whether what follows runs at all.
_ORDERED = (k.Sync, k.AtomicRMW, k.Break, k.Continue, k.Assert)


def fuse_sibling_loops(task: k.Task) -> k.Task:
    """Top-level loops of a task over the same range that only fold values (no store, atomic or
    barrier), where the later one reads nothing the earlier one computes, become one loop: the
    sums of layer_norm backward's weight and bias gradients, or the two means a fusion's var and
    mean each take, then read their row or column once. Definitions between the two loops move
    before the first when they read nothing it computes; stores between them (the first's result)
    move after the merged loop when the later loop does not read their array. The merged loop's
    body is merged the same way, so two nests over the same ranges (batch_norm's sums over batch,
    height and width) stay one nest. Under `remembered_walks()` a task is merged once, however often
    it is asked (a GPU plan asks of a trial merge, then of the task made of it)."""
    with remembered_walks():
        return _task_with_siblings_fused(task)


@_remembered
def _task_with_siblings_fused(task: k.Task) -> k.Task:
    # A merge of tasks A and B (fuse_tasks) begins with A's body: the search over it goes as over A
    # alone (see _fused_siblings), so it starts from A's answer, and a run of merges is not searched
    # again from its first task at each one.
    first = _WALKS.get().get((_merge, "first", id(task)), (None, None))[1]
    if first is None:
        body = _fused_siblings(list(task.body))
    else:
        done = _task_with_siblings_fused(first).body
        body = _fused_siblings([*done, *task.body[len(first.body):]], len(done))
    return dataclasses.replace(task, body=body) if body != task.body else task


def _fused_siblings(body: list[k.Stmt], start: int = 0) -> tuple[k.Stmt, ...]:
    """`body` with its sibling loops merged, to a fixed point. Whether a loop joins an earlier one
    depends only on the statements up to it: where `body[:start]` is a fixed point already (the body
    of a loop merged here, which a later sibling's body extends), no loop there needs asking again."""
    changed = True
    while changed:
        changed = False
        for j in range(start, len(body)):
            later = body[j]
            found = _sibling_before(body, j)
            if found is not None:
                i, prelude = found
                first = body[i]
                rename = lambda n, a=later.var, b=first.var: b if n is a else n  # noqa: E731
                inner = _fused_siblings(list(first.body + tuple(_map(s, rename) for s in later.body)),
                                        len(first.body) if first.__dict__.get("_siblings_fused") else 0)
                merged = k.For(first.var, first.begin, first.end, inner, first.step, first.vectorize)
                object.__setattr__(merged, "_siblings_fused", True)  # its body is a fixed point
                between = body[i + 1:j]
                moved = [s for n, s in enumerate(between) if n in prelude]
                stay = [s for n, s in enumerate(between) if n not in prelude]
                body = body[:i] + moved + [merged] + stay + body[j + 1:]
                # No loop before `later` had one to join, and the statements before `first` are as
                # they were: the search goes on from where the merged loop's statements start.
                start, changed = i, True
                break
    return tuple(body)


def _sibling_before(body: list[k.Stmt], j: int) -> tuple[int, set[int]] | None:
    """An earlier loop that the loop at `j` may join (see fuse_sibling_loops): its position, and the
    positions (counted from just after it) of the statements between the two that move before the
    merged loop, the definitions the later loop reads; the others stay after it. The later loop
    moves up past statements it has no dependence on either way (batch_norm's output loop between
    the statistics its channel task computes and the same statistics its running-mean output takes
    again), so the two folds share one pass and then one result (reuse_reductions)."""
    later = body[j]
    if not _folds_only(later):
        return None
    for i in range(j - 1, -1, -1):
        first = body[i]
        if not (isinstance(first, k.For) and _folds_only(first)
                and (first.begin, first.end, first.step, first.var.dtype)
                == (later.begin, later.end, later.step, later.var.dtype)):
            continue
        if _reads(first) & _assigned(later):
            return None
        prelude = _prelude(body[i + 1:j], later, _assigned(first))
        if prelude is not None:
            return i, prelude
        if any(not isinstance(s, (k.Let, k.Store)) for s in body[i + 1:j]):
            return None  # what kept this pair apart keeps any earlier loop from the later one too
    return None


def _prelude(between: list[k.Stmt], later: k.For, computed: frozenset[k.Var]) -> set[int] | None:
    """The positions in `between` of the definitions `later` reads (through each other), which move
    before the merged loop; None where the loops cannot meet: a moved definition reads what the first
    loop computes or what a statement left behind defines or stores, or `later` and a statement left
    behind depend on each other (one reads what the other assigns, or loads what it stores), or one
    left behind synchronizes threads (the later loop's loads would move across a barrier)."""
    needed, prelude = set(_reads(later)), set()
    for n in range(len(between) - 1, -1, -1):
        s = between[n]
        if isinstance(s, k.Let) and s.var in needed:
            prelude.add(n)
            needed |= _reads(s)
    moved = [between[n] for n in prelude]
    stay = [s for n, s in enumerate(between) if n not in prelude]
    left_defines = frozenset().union(*(_summary(s).assigned | _summary(s).defined for s in stay))
    left_stores = frozenset().union(*(_summary(s).stored for s in stay))
    if any(_loaded_arrays(s) & left_stores for s in moved):
        return None
    if any(_reads(s) & _assigned(later) or _summary(s).syncs for s in stay):
        return None
    if needed & (computed | left_defines) or _loaded_arrays(later) & left_stores:
        return None
    return prelude


@dataclasses.dataclass(frozen=True)
class _Summary:
    """What the merge asks of a statement, gathered bottom-up: a statement's answer joins its own
    expressions' with its child statements', so a loop a merge makes is answered from its children's
    remembered answers, not by walking its whole body again."""

    not_folds: bool  # a store, atomic, barrier, allocation, jump or while loop occurs in it
    assigned: frozenset[k.Var]  # locals and loop indices it assigns
    defined: frozenset[k.Var]  # locals and loop indices it declares (a Let's or a For's)
    used: frozenset[k.Var]  # every local it mentions
    loaded: frozenset[str]  # the arrays it loads from
    stored: frozenset[str]  # the arrays it stores to or updates atomically
    syncs: bool  # a barrier, an atomic, a jump or an assertion occurs in it (_ORDERED)


@_remembered
def _summary(s: k.Stmt) -> _Summary:
    parts = [_summary(c) for c in _children(s) if isinstance(c, k.Stmt)]
    nodes = [n for c in _children(s) if isinstance(c, k.Expr) for n in _walk(c)]
    own = frozenset({s.var}) if isinstance(s, (k.Let, k.Assign, k.For, k.Alloc)) else frozenset()
    if isinstance(s, k.StoreLocal) or (isinstance(s, k.AtomicRMW) and s.result is not None):
        own = frozenset({s.array if isinstance(s, k.StoreLocal) else s.result})
    return _Summary(
        isinstance(s, _NOT_FOLDS) or any(p.not_folds for p in parts),
        own.union(*(p.assigned for p in parts)),
        (own if isinstance(s, (k.Let, k.For, k.Alloc)) else frozenset()).union(*(p.defined for p in parts)),
        frozenset(n for n in nodes if isinstance(n, k.Var)).union(*(p.used for p in parts)),
        frozenset(n.param.name for n in nodes if isinstance(n, k.Load)).union(*(p.loaded for p in parts)),
        frozenset({s.param.name} if isinstance(s, (k.Store, k.AtomicRMW)) else ()).union(*(p.stored for p in parts)),
        isinstance(s, _ORDERED) or any(p.syncs for p in parts))


def _folds_only(loop: k.Stmt) -> bool:
    return isinstance(loop, k.For) and not any(_summary(s).not_folds for s in loop.body)


def _assigned(s: k.Stmt) -> frozenset[k.Var]:
    return _summary(s).assigned


def _reads(s: k.Stmt) -> frozenset[k.Var]:
    summary = _summary(s)
    return summary.used - summary.defined


def _loaded_arrays(s: k.Stmt) -> frozenset[str]:
    return _summary(s).loaded
