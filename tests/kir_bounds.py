"""Which input elements a fusion's CPU kernel reads, checked against the inputs' memory: Kernel IR run
on its index arithmetic alone, for small inputs.

The kernel is the one the CPU backend compiles (engine.lower_fusion). Every statement runs with the
extents of the call; integer expressions (loop indices, extents, their arithmetic and comparisons)
take their values, while anything read from memory is unknown. An `If` on a known condition takes
its branch; on an unknown one (a condition on data) both. Each load from an input is checked against
the span of that input's elements, so a read past its end shows though its value never reaches an
output (a reduction computed for a row that a pad or cat then drops).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from braze import engine
from braze.kir import nodes as k
from braze.kir.python import floordiv, remainder
from braze.runtime.inputs import bind_inputs

_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": floordiv,
           "remainder": remainder, "minimum": min, "maximum": max, "lt": operator.lt, "le": operator.le,
           "gt": operator.gt, "ge": operator.ge, "eq": operator.eq, "ne": operator.ne,
           "logical_and": lambda a, b: a and b, "logical_or": lambda a, b: a or b, "bitwise_and": operator.and_,
           "bitwise_or": operator.or_, "bitwise_xor": operator.xor, "left_shift": operator.lshift,
           "right_shift": operator.rshift}


class _Run:
    """One run of a kernel's statements: the known integer values of its variables, the faults found."""

    def __init__(self, arrays: dict[str, np.ndarray], scalars: dict[str, int]) -> None:
        self.arrays, self.scalars = arrays, scalars
        self.env: dict[k.Var, object] = {}
        self.faults: list[str] = []

    def value(self, e: k.Expr):
        if isinstance(e, k.Const):
            return e.value
        if isinstance(e, k.Var):
            return self.env.get(e)
        if isinstance(e, k.ScalarRef):
            return self.scalars.get(e.param.name)
        if isinstance(e, k.Load):
            self.check(e.param, [self.value(i) for i in e.indices])
            return None
        if isinstance(e, k.Cast):
            x = self.value(e.x)
            return x if isinstance(x, (int, bool)) and (e.dtype.is_integer or e.dtype.is_bool) else None
        if isinstance(e, k.Binary) and e.op in _BINARY:
            a, b = self.value(e.a), self.value(e.b)
            return None if a is None or b is None else _BINARY[e.op](a, b)
        if isinstance(e, k.Unary) and e.op == "logical_not":
            x = self.value(e.x)
            return None if x is None else not x
        if isinstance(e, k.Ternary) and e.op == "where":
            cond, a, b = self.value(e.a), self.value(e.b), self.value(e.c)
            return None if cond is None else (a if cond else b)
        for name in getattr(e, "__dataclass_fields__", {}):  # anything else: its loads still happen
            child = getattr(e, name)
            for c in child if isinstance(child, tuple) else (child,):
                if isinstance(c, k.Expr):
                    self.value(c)
        return None

    def check(self, param: k.ArrayParam, indices: list) -> None:
        array = self.arrays.get(param.name)
        if array is None or any(i is None for i in indices):
            return
        steps = [s // array.itemsize for s in array.strides]
        offset = sum(i * s for i, s in zip(indices, steps))
        low = sum((n - 1) * s for n, s in zip(array.shape, steps) if s < 0)
        high = sum((n - 1) * s for n, s in zip(array.shape, steps) if s > 0)
        if array.size == 0 or not low <= offset <= high:
            self.faults.append(f"{param.name}{tuple(indices)}: element {offset} outside [{low}, {high}]")

    def run(self, stmts: Sequence[k.Stmt]) -> None:
        for s in stmts:
            if isinstance(s, (k.Let, k.Assign)):
                self.env[s.var] = self.value(s.value)
            elif isinstance(s, (k.Store, k.AtomicRMW, k.StoreLocal)):
                for e in (*getattr(s, "indices", ()), getattr(s, "index", None), s.value):
                    if e is not None:
                        self.value(e)
            elif isinstance(s, k.If):
                cond = self.value(s.cond)
                for branch, taken in ((s.then, True), (s.orelse, False)):
                    if cond is None or bool(cond) == taken:
                        self.run(branch)
            elif isinstance(s, k.For):
                self.loop(s.var, self.value(s.begin), self.value(s.end), s.step, s.body)
            elif isinstance(s, k.While):  # on counters (strips.py's merges); on data: once
                while (cond := self.value(s.cond)) is None or cond:
                    self.run(s.body)
                    if cond is None:
                        break
            elif not isinstance(s, (k.Alloc, k.Sync)):
                raise NotImplementedError(f"kir_bounds: {type(s).__name__}")

    def loop(self, var: k.Var, begin, end, step: int, body: Sequence[k.Stmt]) -> None:
        assert begin is not None and end is not None, f"loop over {var.name}: unknown bounds"
        for i in range(begin, end, step):
            self.env[var] = i
            self.run(body)


def out_of_bounds_reads(fusion, inputs: Sequence[np.ndarray]) -> list[str]:
    """The reads of `fusion`'s CPU kernel, on `inputs`, that fall outside an input's elements."""
    bound = bind_inputs(fusion, list(inputs))
    lowered = engine.lower_fusion(fusion, engine.signature(fusion, bound))
    arrays = {lowered.params.arrays[id(tv)].name: a for tv, a in zip(fusion.inputs, bound.arrays)
              if id(tv) in lowered.params.arrays}
    run = _Run(arrays, dict(bound.bindings))
    for task in lowered.kernel.tasks:
        if task.kind == "range_for":
            run.loop(task.var, run.value(task.begin), run.value(task.end), 1, task.body)
        else:
            run.run(task.body)
    return run.faults
