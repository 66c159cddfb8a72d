"""Which locals one iteration of a parallel task has set before it reads them.

Every iteration of a parallel loop (a top-level `for`) runs with locals of its own, each starting at
zero. In Python a local read before the iteration sets it holds what the previous iteration left (a
running total, `if c == 0: total = 0` then `total += counts[c]`); run in parallel, the iteration would
read its own zero instead, a silently wrong result. The translator (braze/frontend/kernel_ast.py)
asks `may_read` before each read of a task local and refuses the ones that could see an earlier
iteration's value.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable


class IterationLocals:
    """The locals set on every path so far in the current iteration of a parallel task."""

    def __init__(self) -> None:
        self.surely_set: set[str] = set()
        self.set_by_loops: list[frozenset[str]] = []  # names each enclosing serial loop assigns, innermost last

    def assigned(self, name: str) -> None:
        self.surely_set.add(name)

    def may_read(self, name: str) -> bool:
        """Whether a read of `name` here sees a value of this iteration: it was set on every path so
        far, or an enclosing serial loop sets it, so that a later pass of that loop reads what an
        earlier pass left (`if j == 0: acc = 0.0` then `acc += a[i, j]`), as Python would."""
        return name in self.surely_set or any(name in names for names in self.set_by_loops)

    def branches(self, branches: Iterable[tuple[list[ast.stmt], Callable[[], object]]]) -> None:
        """Translates each branch of an `if` (its statements, a function that translates them) from
        the same state; afterwards, a name is surely set if every branch that falls through to the
        statement after the `if` set it (a branch ending in `break` or `continue` does not)."""
        start = set(self.surely_set)
        reaching = []
        for stmts, translate in branches:
            self.surely_set = set(start)
            translate()
            if not _ends_in_jump(stmts):
                reaching.append(self.surely_set)
        self.surely_set = set.intersection(*reaching) if reaching else start

    def loop(self, node: ast.For | ast.While, translate: Callable[[], object], after: Iterable[str] = ()) -> None:
        """Translates a serial loop's body. After the loop, what every pass surely sets is taken as set,
        and so are the names in `after` (the loop's target, which Python leaves on the last value it
        took): a loop whose body sets a value is taken to run at least once (`for j in range(m): if
        j == 0: acc = 0.0` then `acc += ...`, read after the loop). What only some passes set (a
        `found = j` under an `if`) is not."""
        self.set_by_loops.append(frozenset(_assigned_names(node)))
        try:
            translate()
        finally:
            self.set_by_loops.pop()
        self.surely_set |= set(after)


def _assigned_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _ends_in_jump(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Break, ast.Continue))
