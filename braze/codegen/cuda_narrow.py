"""Float32 values that only a bfloat16 or float16 keeps ("narrow" results), which the CUDA rules may
compute with the approximate exp and division (cuda_rules.py says which and how close).

A value is narrow where it is the float32 operand of a cast to a 2-byte float, or a float32 operand
of an op whose own result is narrow and moves with it by little: every arithmetic op and function,
but not a step (floor, round, `//`: STEPS), and never a non-float32 value (a comparison's operands
stay exact, since an approximation there could flip a branch, not just a last bit). A float32
local (a `Let` or an accumulator's `Assign`) is narrow when every use of it is narrow: a bfloat16
softmax's maximum, its sum of exponentials and the exponentials in that sum then are.
`BRAZE_DISABLE=narrow_math` turns it all off.
"""

from __future__ import annotations

from braze import config
from braze.codegen.cuda_plan import exprs_of, walk
from braze.dtypes import DType
from braze.kir import nodes as k

NARROW_TYPES = frozenset({"bfloat16", "float16"})
# Ops whose result jumps where the operand crosses a point: their operands are never narrow.
STEPS = frozenset({"floor", "ceil", "round", "trunc", "sign", "floordiv", "remainder"})


def operand_is_narrow(op: str, out: DType, narrow: bool, operand: k.Expr) -> bool:
    """Whether `operand` of op `op` (result type `out`, itself narrow or not) is a narrow result."""
    if operand.dtype.name != "float32" or config.disabled("narrow_math"):
        return False
    if op == "cast":
        return out.name in NARROW_TYPES or (narrow and out.is_floating)
    return narrow and op not in STEPS


def always_narrow(task: k.Task, narrow: frozenset[k.Var]) -> frozenset[k.Expr]:
    """The expressions of `task` (Kernel IR nodes are interned: equal ones are one object) that
    every occurrence uses as a narrow result, the locals `narrow` taken as narrow: a value computed
    once and read again elsewhere (cuda_row_values) may be narrow only where all its uses are."""
    exact: set[k.Expr] = set()
    found: set[k.Expr] = set()
    seen: set[tuple[int, bool]] = set()

    def visit(e: k.Expr, is_narrow: bool) -> None:
        if (id(e), is_narrow) in seen:
            return
        seen.add((id(e), is_narrow))
        (found if is_narrow else exact).add(e)
        op = _op(e)
        for child in _children(e):
            visit(child, op is not None and operand_is_narrow(op, e.dtype, is_narrow, child))

    for s in walk(task.body):
        for e in exprs_of(s):
            visit(e, isinstance(s, (k.Let, k.Assign)) and e is s.value and s.var in narrow)
    return frozenset(found - exact)


def narrow_locals(task: k.Task) -> frozenset[k.Var]:
    """The float32 locals of `task` whose every use is narrow: from all of them, those with a use
    that is not are dropped until none is (a local used only by narrow locals, or by itself, as an
    accumulator, stays)."""
    if config.disabled("narrow_math"):
        return frozenset()
    defined = [s for s in walk(task.body) if isinstance(s, (k.Let, k.Assign))]
    narrow = {s.var for s in defined if s.var.dtype.name == "float32"}
    while True:
        used_exactly: set[k.Var] = set()
        seen: set[tuple[int, bool]] = set()
        for s in walk(task.body):
            for e in exprs_of(s):
                root = isinstance(s, (k.Let, k.Assign)) and e is s.value and s.var in narrow
                _exact_uses(e, root, used_exactly, seen)
        if not narrow & used_exactly:
            return frozenset(narrow)
        narrow -= used_exactly


def _exact_uses(e: k.Expr, narrow: bool, found: set[k.Var], seen: set[tuple[int, bool]]) -> None:
    """Adds to `found` the locals `e` reads where the value is not narrow (`narrow`: whether `e` is)."""
    if (id(e), narrow) in seen:  # the Kernel IR is a DAG: each node once per context
        return
    seen.add((id(e), narrow))
    if isinstance(e, k.Var):
        if not narrow:
            found.add(e)
        return
    op = _op(e)
    for child in _children(e):
        _exact_uses(child, op is not None and operand_is_narrow(op, e.dtype, narrow, child), found, seen)


def _op(e: k.Expr) -> str | None:
    """The op whose operands `e`'s children are (None: a load's indices and the like, never narrow)."""
    return "cast" if isinstance(e, k.Cast) else e.op if isinstance(e, (k.Unary, k.Binary, k.Ternary)) else None


def _children(e: k.Expr):
    for name in getattr(e, "__dataclass_fields__", {}):
        child = getattr(e, name)
        if isinstance(child, k.Expr):
            yield child
        elif isinstance(child, tuple):
            yield from (c for c in child if isinstance(c, k.Expr))
