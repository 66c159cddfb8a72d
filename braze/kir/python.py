"""Kernel IR integer expressions as Python: the one compiler of task bounds (and other launch-time
values) into host functions, for fusions and loop kernels on every backend.

A bound reads scalar parameters and array extents; each caller says how its function reads them
(`leaf`). Integer `//` and `%` follow the generated code on the CPU and the GPU (prelude.cuh,
codegen/llvm_rules.py): Python's floor semantics, and a division by zero gives 0 instead of
raising, so a bound computed on the host agrees with the same expression computed in a kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from braze.kir import nodes as k

_FORMATS = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "floordiv": "floordiv({}, {})",
            "remainder": "remainder({}, {})", "minimum": "min({}, {})", "maximum": "max({}, {})"}
# A nonzero constant divisor (block sizes, tile widths: nearly every bound) needs no zero test.
_BY_CONSTANT = {"floordiv": "({} // {})", "remainder": "({} % {})"}


def floordiv(a: int, b: int) -> int:
    """`a // b`, or 0 where `b` is 0 (as in generated code)."""
    return a // b if b else 0


def remainder(a: int, b: int) -> int:
    """`a % b`, or 0 where `b` is 0 (as in generated code)."""
    return a % b if b else 0


Leaf = Callable[[k.Expr], "str | None"]  # Python source reading a parameter or extent; None: not a leaf


def python_expression(e: k.Expr, leaf: Leaf) -> str:
    """Python source for an integer expression; raises TypeError for what the host cannot evaluate
    (loads, loop indices, float math)."""
    source = leaf(e)
    if source is not None:
        return source
    if isinstance(e, k.Const):
        return repr(int(e.value))
    if isinstance(e, k.Cast) and e.dtype.is_integer:  # truncated toward zero, as a C cast does
        inner = python_expression(e.x, leaf)
        return inner if e.x.dtype.is_integer else f"int({inner})"
    if isinstance(e, k.Unary) and e.op == "neg":  # a step written -s
        return f"(-{python_expression(e.x, leaf)})"
    if isinstance(e, k.Binary) and e.op in _FORMATS:
        constant = isinstance(e.b, k.Const) and int(e.b.value) != 0
        form = _BY_CONSTANT[e.op] if constant and e.op in _BY_CONSTANT else _FORMATS[e.op]
        return form.format(python_expression(e.a, leaf), python_expression(e.b, leaf))
    raise TypeError(f"task bounds: cannot evaluate {type(e).__name__} on the host")


def evaluable(e: k.Expr, leaf: Leaf) -> bool:
    """Whether `python_expression` can compile `e`."""
    try:
        python_expression(e, leaf)
    except TypeError:
        return False
    return True


def python_function(exprs: Sequence[k.Expr | Sequence[k.Expr]], arguments: str, leaf: Leaf
                    ) -> Callable[..., tuple]:
    """One function of `arguments` (Python parameter text, such as "s" or "A, S") returning the
    values of `exprs` as a tuple (a tuple of values for an item that is a sequence of expressions:
    a task's (begin, end) pair, with no unpacking left to the caller)."""
    def item(e: k.Expr | Sequence[k.Expr]) -> str:
        if isinstance(e, k.Expr):
            return python_expression(e, leaf)
        return "(" + "".join(f"{python_expression(x, leaf)}, " for x in e) + ")"

    body = "".join(f"{item(e)}, " for e in exprs)
    names = {"floordiv": floordiv, "remainder": remainder}
    return eval(f"lambda {arguments}: ({body})", names)  # noqa: S307  (built above from Kernel IR only)


def scalar_by_name(e: k.Expr) -> str | None:
    """The leaf of functions of one dict of scalar values by parameter name (`s`)."""
    return f"s[{e.param.name!r}]" if isinstance(e, k.ScalarRef) else None
