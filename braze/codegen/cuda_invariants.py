"""Work of a CUDA task that is the same for every row, done once a thread before the rows.

A mixin of `cuda.TaskWriter` (which supplies `line`, `expr`, `stride`, `pointer`, the task and its
vector plans). Two kinds of work, each behind a feature of braze/config.py:

- `fast_divisors`: a row's index digits divide it by run-time extents (`p % T0_s2`, `p / T0_s2 % T0_s1`),
  and the hardware has no integer divider: each such unsigned division took ~17 instructions a row,
  reciprocal included. A divisor that reads only the kernel's parameters becomes a `BzDivisor` (the
  prelude's multiplier and shift) once a thread, and each division by it a multiply-high, an add and a
  shift. Only for 32-bit integers proven never negative (braze/kir/signs.py); 64-bit ones divide as
  before.
- `uniform_alignment`: the vector path of a row loop tests that every array's row start is aligned to a
  vector, at every row. Where each array's base is aligned and each stride that multiplies an index
  that changes from row to row is a multiple of the vector, every row start is aligned: one test a
  thread, and the test per row only where it fails (other layouts).
"""

from __future__ import annotations

import math

from braze import config
from braze.codegen.cuda_plan import exprs_of, replace_var_in_access, vector_alignment, walk
from braze.kir import nodes as k
from braze.passes.simplify import map_children, simplify_expr

# The longest row (elements of a row loop) whose per-row work is done once a thread (long_rows).
SHORT_ROW = 1024
_LOCAL = (k.Var, k.Load, k.LoadLocal, k.Philox)  # what makes a value differ from row to row or thread to thread


def kernel_invariant(e: k.Expr) -> bool:
    """Whether `e` reads only the kernel's parameters and constants: one value for the whole launch."""
    return not any(isinstance(x, _LOCAL) for x in distinct_sub_exprs([e]))


def _children(e: k.Expr) -> list[k.Expr]:
    """The operands of `e` (a Load's indices among them)."""
    found = []
    for name in getattr(e, "__dataclass_fields__", {}):
        child = getattr(e, name)
        if isinstance(child, k.Expr):
            found.append(child)
        elif isinstance(child, tuple):
            found += [c for c in child if isinstance(c, k.Expr)]
    return found


def _factors(e: k.Expr) -> list[k.Expr]:
    """The factors of a product (`e` itself where it is none)."""
    if isinstance(e, k.Binary) and e.op == "mul":
        return _factors(e.a) + _factors(e.b)
    return [e]


def distinct_sub_exprs(roots: list[k.Expr]) -> list[k.Expr]:
    """Every expression under `roots`, each once (a value used twice in the Kernel IR DAG is one node)."""
    seen: dict[k.Expr, None] = {}
    stack = list(reversed(roots))
    while stack:
        e = stack.pop()
        if e not in seen:
            seen[e] = None
            stack += reversed(_children(e))
    return list(seen)


class InvariantWriter:
    """Row-invariant work of a task writer (see the module docstring)."""

    def row_lets(self) -> dict[k.Var, k.Expr]:
        """The locals the task's body gives one value before its rows' work (a top-level `Let` never
        assigned again: hoisted invariants such as a slice's start) -> that value."""
        if "_row_lets" not in self.__dict__:
            assigned = {s.var for s in walk(self.task.body) if isinstance(s, k.Assign)}
            self._row_lets = {s.var: s.value for s in self.task.body if isinstance(s, k.Let) and s.var not in assigned}
            self._resolved: dict[k.Expr, k.Expr] = {}
            self._invariant: dict[k.Expr, bool] = {}
        return self._row_lets

    def resolved(self, e: k.Expr) -> k.Expr:
        """`e` with the row_lets replaced by their values."""
        lets = self.row_lets()
        found = self._resolved.get(e)
        if found is None:
            found = self._resolved[e] = self.resolved(lets[e]) if isinstance(e, k.Var) and e in lets \
                else map_children(e, self.resolved)
        return found

    def invariant(self, e: k.Expr) -> bool:
        """Whether `e` is kernel-invariant once its row_lets are read as their values."""
        lets = self.row_lets()
        found = self._invariant.get(e)
        if found is None:
            if isinstance(e, k.Var):
                found = e in lets and self.invariant(lets[e])
            else:
                found = not isinstance(e, _LOCAL) and all(self.invariant(c) for c in _children(e))
            self._invariant[e] = found
        return found

    def long_rows(self) -> bool:
        """Whether the task's rows may be long: a row loop of run-time length, or of more than
        SHORT_ROW elements. Per-row work done once a thread pays where a thread takes many rows
        (RoPE's halves of 64: 3.20 -> 3.50 TB/s on an H200); over long rows the per-row work is
        already small, and the setup's registers and instructions cost more than they save
        (batch_norm's and group_norm's rows of H*W ran 3-4% slower with it)."""
        loops = [self.loops_by_id[id_] for id_ in self.vectors if id_ in self.loops_by_id]
        return any(not (isinstance(loop.begin, k.Const) and isinstance(loop.end, k.Const))
                   or loop.end.value - loop.begin.value > SHORT_ROW for loop in loops)

    # --- divisions by extents ------------------------------------------------------------------------
    def plan_divisors(self) -> dict[k.Expr, str]:
        """Each divisor of the task's unsigned 32-bit divisions that is kernel-invariant (and no
        constant: those are shifts, masks or the compiler's own multiplications) and divides a value
        that is not -> the name of its BzDivisor."""
        if config.disabled("fast_divisors") or self.long_rows():
            return {}
        roots = [x for s in walk(self.task.body) for x in exprs_of(s)]
        divisors: dict[k.Expr, str] = {}
        for e in distinct_sub_exprs(roots):
            if isinstance(e, k.Binary) and e.op in ("floordiv", "remainder") and e.dtype.name == "int32" \
                    and not isinstance(e.b, k.Const) and e.b not in divisors and self.invariant(e.b) \
                    and not self.invariant(e.a) and self.unsigned_division(e):
                divisors[e.b] = f"bz_div{len(divisors)}"
        return divisors

    def fast_division(self, e: k.Binary) -> str | None:
        """`e` (an unsigned division, cuda.TaskWriter.binary) through its divisor's BzDivisor, or None."""
        name = self.divisors.get(e.b) if e.dtype.name == "int32" else None
        if name is None or name not in self.declared_divisors:  # one declared before the divisor it divides
            return None
        return f"bz_fast_{e.op}({self.expr(e.a)}, {name})"

    # --- alignment of the vector paths ----------------------------------------------------------------
    def plan_aligned_rows(self) -> dict[int, str]:
        """id(row loop) -> the name of its thread's test that every row start of the loop's vector
        accesses is aligned (declared by declare_invariants), for the loops that have one."""
        self.aligned_row_tests: dict[str, str] = {}  # name -> text
        if config.disabled("uniform_alignment") or self.long_rows():
            return {}
        tests: dict[str, str] = {}  # the test's text -> its name: loops testing the same share it
        names: dict[int, str] = {}
        for id_ in self.vectors:
            loop = self.loops_by_id.get(id_)
            text = self.uniform_alignment(loop) if loop is not None else None
            if text is not None:
                names[id_] = tests.setdefault(text, f"bz_aligned_rows{len(tests)}")
        self.aligned_row_tests = {name: text for text, name in tests.items()}
        return names

    def uniform_alignment(self, loop: k.For) -> str | None:
        """A test, reading only parameters, that implies every vector access of `loop` is aligned at
        every row (None where no such test can pass: an index that changes by row on a stride
        the vector does not divide, or a misaligned constant offset)."""
        vector, terms = self.vectors[id(loop)], []
        for access in (*vector.loads, *vector.stores):
            mask = vector_alignment(access.param.dtype, vector.width) - 1
            elements = (mask + 1) // access.param.dtype.itemsize  # the vector's alignment, in elements
            terms.append(f"((reinterpret_cast<unsigned long long>({self.pointer(access.param)}) & {mask}) == 0)")
            start = replace_var_in_access(access, loop.var, loop.begin)
            for axis, index in enumerate(start):
                term = self.aligned_term(access.param, axis, simplify_expr(self.resolved(index)), elements)
                if term is None:
                    return None
                terms.append(term)
        return " && ".join(t for t in dict.fromkeys(terms) if t != "true")

    def aligned_term(self, param: k.ArrayParam, axis: int, index: k.Expr, elements: int) -> str | None:
        """A test that `index * stride` of this axis is a multiple of `elements` at every row: "true"
        where that is known, None where it cannot hold at every row."""
        stride = param.static_stride(axis)
        if stride == 0:
            return "true"
        return self.multiple_of(index, stride if stride is not None else self.stride(param, axis), elements)

    def multiple_of(self, e: k.Expr, scale: int | str, elements: int) -> str | None:
        """A test, the same for every row, that `e * scale` is a multiple of `elements` (a power of two,
        so products may wrap): a sum's terms each, a product through its invariant factors (a row's
        start `row * n` on a unit stride is aligned where n is), what changes by row through `scale`."""
        if isinstance(e, k.Binary) and e.op in ("add", "sub"):
            parts = [self.multiple_of(x, scale, elements) for x in (e.a, e.b)]
            return None if None in parts else " && ".join(p for p in parts if p != "true") or "true"
        factors = _factors(e)
        invariant = [f for f in factors if self.invariant(f)]
        if not invariant:  # the term changes by row: only the scale can make it a multiple
            return f"({scale} % {elements} == 0)" if isinstance(scale, str) else \
                "true" if scale % elements == 0 else None
        constant = math.prod(f.value for f in invariant if isinstance(f, k.Const))
        constant *= scale if isinstance(scale, int) else 1
        texts = [f"(unsigned long long)({self.expr(f)})" for f in invariant if not isinstance(f, k.Const)]
        texts += [f"(unsigned long long)({scale})"] if isinstance(scale, str) else []
        if not texts:
            return "true" if constant % elements == 0 else None
        if constant % elements == 0:
            return "true"
        return f"(({' * '.join(texts + ([str(constant)] if constant != 1 else []))}) % {elements} == 0)"

    def with_aligned_rows(self, loop: k.For, row_terms: list[str]) -> list[str]:
        """The loop's per-row alignment tests, taken only where its thread's test fails."""
        name = self.aligned_rows.get(id(loop))
        if name is None or not row_terms:
            return row_terms
        return [f"({name} || ({' && '.join(row_terms)}))"]

    # --- declarations ---------------------------------------------------------------------------------
    def declare_invariants(self) -> None:
        """The BzDivisors and the alignment tests of the task, after its parameters."""
        for divisor, name in self.divisors.items():
            self.line(f"const BzDivisor {name} = bz_divisor((unsigned)({self.expr(self.resolved(divisor))}));")
            self.declared_divisors.add(name)
        for name, text in self.aligned_row_tests.items():
            self.line(f"const bool {name} = {text};")
