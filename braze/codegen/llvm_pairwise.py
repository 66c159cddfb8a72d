"""Float32 sums on the CPU in a blocked, pairwise order: accurate and the same bits on every run.

A reduction loop `for i in range(a, b): acc = reduce_add(acc, x)` with a float32 `acc` runs in
blocks of BLOCK elements. Within a block, LLVM vectorizes (reduce_add may be reassociated), so each
vector lane sums its own few elements; each block's partial is then pushed onto a stack of partials
that combines two subtrees whenever they have the same number of blocks (a binary counter over the
blocks), and `acc` is the start value plus the stack folded from its top. The summation tree depends
on the extents alone. The stack lives as long as the accumulator: the loops over the rows of a
full reduction feed one tree, so a 16M-element float32 sum lands within 1e-6 of the float64 sum,
where a serial one drifts by 1e-3.

Only accumulators whose every update is such a statement, directly in a loop's body that reads the
accumulator nowhere else, are rewritten: their value is then needed only after each loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from llvmlite import ir

from braze.kir import nodes as k

if TYPE_CHECKING:
    from braze.codegen.llvm import TaskEmitter

BLOCK = 1024  # elements per block: 16 per lane where LLVM runs 4 vectors of 16 floats
# Elements per block of a loop that reads with a stride (LLVM leaves it scalar, so the block is one
# serial sum): a column summed down 65536 rows of 0.1 is off by 1e-5 in blocks of 1024, 3e-7 in 64.
STRIDED_BLOCK = 64
LEVELS = 64  # one stack slot per level: any count of blocks fits
_F32 = ir.FloatType()
_I64 = ir.IntType(64)


def _walk(stmts: tuple[k.Stmt, ...]) -> Iterator[k.Stmt]:
    for s in stmts:
        yield s
        for name in ("body", "then", "orelse"):
            yield from _walk(getattr(s, name, ()))


def _reads(e: k.Expr, var: k.Var) -> bool:
    if e == var:
        return True
    for name in getattr(e, "__dataclass_fields__", {}):
        child = getattr(e, name)
        children = child if isinstance(child, tuple) else (child,)
        if any(isinstance(c, k.Expr) and _reads(c, var) for c in children):
            return True
    return False


def _stmt_reads(s: k.Stmt, var: k.Var) -> bool:
    """Whether `s` (its own expressions and those of nested statements) reads `var`."""
    return any(_reads(e, var) for inner in _walk((s,)) for e in _expressions(inner))


def _sum_update(s: k.Stmt) -> k.Var | None:
    """The accumulator of `acc = reduce_add(acc, x)` (x not reading acc), for a float32 acc."""
    if not isinstance(s, k.Assign) or s.var.dtype.name != "float32":
        return None
    v = s.value
    if isinstance(v, k.Binary) and v.op == "reduce_add" and v.a == s.var and not _reads(v.b, s.var):
        return s.var
    return None


def _loop_sums(loop: k.For) -> set[k.Var]:
    """The accumulators `loop` may run in blocks: updated at its top level, read nowhere else in it."""
    if loop.step != 1 or any(isinstance(s, (k.Break, k.Continue)) for s in _walk(loop.body)):
        return set()
    found = {var for s in loop.body if (var := _sum_update(s)) is not None}
    return {var for var in found
            if not any(_stmt_reads(s, var) for s in loop.body if _sum_update(s) != var)}


def _loads(e: k.Expr) -> Iterator[k.Load]:
    if isinstance(e, k.Load):
        yield e
    for name in getattr(e, "__dataclass_fields__", {}):
        child = getattr(e, name)
        for c in child if isinstance(child, tuple) else (child,):
            if isinstance(c, k.Expr):
                yield from _loads(c)


def block_size(loop: k.For) -> int:
    """BLOCK where every load of the loop that moves with it walks a unit-stride last axis (LLVM
    vectorizes those), else STRIDED_BLOCK."""
    for s in _walk(loop.body):
        for load in (x for e in _expressions(s) for x in _loads(e)):
            moving = [axis for axis, i in enumerate(load.indices) if _reads(i, loop.var)]
            last = load.param.ndim - 1
            if moving and (moving != [last] or load.param.static_stride(last) != 1):
                return STRIDED_BLOCK
    return BLOCK


def _expressions(s: k.Stmt) -> Iterator[k.Expr]:
    for name in getattr(s, "__dataclass_fields__", {}):
        value = getattr(s, name)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, k.Expr):
                yield v


def blocked_sums(task: k.Task) -> dict[int, tuple[k.Var, ...]]:
    """id(loop) -> the float32 accumulators that loop sums in blocks, for every loop of the task."""
    statements = list(_walk(task.body))
    defined = {s.var for s in statements if isinstance(s, k.Let)}
    per_loop = {id(s): _loop_sums(s) for s in statements if isinstance(s, k.For)}
    blocked = set().union(*per_loop.values()) & defined
    for s in statements:  # every update of a blocked accumulator must be one its loop blocks
        if isinstance(s, k.Assign) and s.var in blocked:
            if not any(s in loop.body and s.var in per_loop[id(loop)] for loop in statements
                       if isinstance(loop, k.For)):
                blocked.discard(s.var)
    return {key: tuple(sorted(found & blocked, key=lambda v: v.name)) for key, found in per_loop.items()
            if found & blocked}


class PairwiseSums:
    """The stack of block partials of each blocked accumulator of one task function."""

    def __init__(self, cg: TaskEmitter, loops: dict[int, tuple[k.Var, ...]]) -> None:
        self.cg, self.loops = cg, loops
        self.accumulators = {v for found in loops.values() for v in found}
        self.slots: dict[k.Var, tuple[ir.Value, ...]] = {}

    def _state(self, var: k.Var) -> tuple[ir.Value, ...]:
        """(stack pointer, top, blocks so far, start value) of `var`, allocated once per function."""
        if var not in self.slots:
            eb = self.cg.entry_builder
            stack = eb.alloca(ir.ArrayType(_F32, LEVELS), name=f"{var.name}_stack")
            first = eb.gep(stack, [_I64(0), _I64(0)], inbounds=True)
            self.slots[var] = (first, eb.alloca(_I64, name=f"{var.name}_top"),
                               eb.alloca(_I64, name=f"{var.name}_blocks"), eb.alloca(_F32, name=f"{var.name}_start"))
        return self.slots[var]

    def define(self, s: k.Let) -> bool:
        """Emits `Let` of a blocked accumulator (an empty stack); False for other variables."""
        if s.var not in self.accumulators:
            return False
        b, value = self.cg.b, self.cg.expr(s.value)
        _, top, blocks, start = self._state(s.var)
        b.store(value, self.cg.var_slot(s.var))
        b.store(value, start)
        b.store(_I64(0), top)
        b.store(_I64(0), blocks)
        return True

    def loop(self, s: k.For) -> bool:
        """Emits a loop that sums in blocks; False for other loops."""
        sums = self.loops.get(id(s))
        if not sums:
            return False
        cg = self.cg
        begin, end = cg.expr(s.begin), cg.expr(s.end)
        first = cg.entry_builder.alloca(begin.type, name=f"{s.var.name}_block")
        cg.b.store(begin, first)
        head, body, after = (cg.fn.append_basic_block(n) for n in ("block_head", "block", "blocks_done"))
        cg.b.branch(head)
        cg.b.position_at_end(head)
        lo = cg.b.load(first)
        cg.b.cbranch(cg.b.icmp_signed("<", lo, end), body, after)
        cg.b.position_at_end(body)
        left = cg.b.sub(end, lo)  # never past the end, and no overflow near the index type's limit
        size = ir.Constant(begin.type, block_size(s))
        hi = cg.b.add(lo, cg.b.select(cg.b.icmp_signed("<", left, size), left, size))
        for var in sums:
            cg.b.store(ir.Constant(_F32, 0.0), cg.var_slot(var))
        cg.loop(s.var, lo, hi, 1, lambda: cg.block(s.body))
        for var in sums:
            self._push(var, cg.b.load(cg.var_slot(var)))
        cg.b.store(hi, first)
        cg.b.branch(head)
        cg.b.position_at_end(after)
        for var in sums:
            cg.b.store(self._total(var), cg.var_slot(var))
        return True

    def _push(self, var: k.Var, partial: ir.Value) -> None:
        """While the count of blocks so far is odd, the partial absorbs the stack's top (two trees
        of equal size become one); then it becomes the top."""
        cg, b = self.cg, self.cg.b
        stack, top, blocks, _ = self._state(var)
        value, carry = cg.entry_builder.alloca(_F32), cg.entry_builder.alloca(_I64)
        b.store(partial, value)
        b.store(b.load(blocks), carry)
        head, merge, done = (cg.fn.append_basic_block(n) for n in ("carry", "merge", "pushed"))
        b.branch(head)
        b.position_at_end(head)
        odd = b.icmp_unsigned("!=", b.and_(b.load(carry), _I64(1)), _I64(0))
        b.cbranch(odd, merge, done)
        b.position_at_end(merge)
        level = b.sub(b.load(top), _I64(1))
        b.store(level, top)
        b.store(b.fadd(b.load(b.gep(stack, [level])), b.load(value)), value)
        b.store(b.lshr(b.load(carry), _I64(1)), carry)
        b.branch(head)
        b.position_at_end(done)
        level = b.load(top)
        b.store(b.load(value), b.gep(stack, [level]))
        b.store(b.add(level, _I64(1)), top)
        b.store(b.add(b.load(blocks), _I64(1)), blocks)

    def _total(self, var: k.Var) -> ir.Value:
        """The start value plus the stack folded from its top (the smallest tree first)."""
        cg, b = self.cg, self.cg.b
        stack, top, _, start = self._state(var)
        total, level = cg.entry_builder.alloca(_F32), cg.entry_builder.alloca(_I64)
        b.store(ir.Constant(_F32, 0.0), total)
        b.store(b.load(top), level)
        head, add, done = (cg.fn.append_basic_block(n) for n in ("fold", "fold_add", "folded"))
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(b.icmp_signed(">", b.load(level), _I64(0)), add, done)
        b.position_at_end(add)
        below = b.sub(b.load(level), _I64(1))
        b.store(below, level)
        b.store(b.fadd(b.load(b.gep(stack, [below])), b.load(total)), total)
        b.branch(head)
        b.position_at_end(done)
        return b.fadd(b.load(start), b.load(total))
