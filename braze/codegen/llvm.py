"""LLVM IR for the CPU from Kernel IR: one function per task over an index range [lo, hi).

Each task function has the C signature `void task(int64 lo, int64 hi, int64 *args)`. `args` is
the packed argument block: per array parameter its data pointer, then its extents, then its
strides (in elements); per scalar parameter one 8-byte slot. Loads of parameter fields are
emitted once, in the entry block, so LLVM sees them as loop-invariant and can vectorize.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir

from braze import dtypes as dt
from braze.codegen import llvm_invariants, llvm_math, llvm_private
from braze.codegen.llvm_pairwise import PairwiseSums, blocked_sums
from braze.codegen.llvm_rules import RULES
from braze.codegen.llvm_types import F32, I1, I8, I64, MEMORY_TYPE, VOID, register_type
from braze.dtypes import DType
from braze.errors import UnsupportedError
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout


class TaskEmitter:
    """Emits one task as one LLVM function."""

    def __init__(self, module: ir.Module, kernel: k.Kernel, task: k.Task, layout: ArgLayout,
                 fast_math: bool = False) -> None:
        self.module, self.kernel, self.task, self.layout = module, kernel, task, layout
        self.fast_flags = ("fast",) if fast_math else ()
        self.fn = ir.Function(module, ir.FunctionType(VOID, [I64, I64, I64.as_pointer()]), name=task.name)
        self.fn.args[2].add_attribute("noalias")
        self.entry = self.fn.append_basic_block("entry")
        self.entry_builder = ir.IRBuilder(self.entry)
        self.b = ir.IRBuilder(self.fn.append_basic_block("body"))
        self.fields: dict[tuple[str, str, int], ir.Value] = {}
        self.vars: dict[k.Var, ir.Value] = {}
        # The values of the current statement's expressions: a node used twice is one SSA value. Every
        # value computed while a statement is emitted dominates the rest of that statement (operands
        # of `where`, `and`, `or` are all evaluated: select, and, or), so the map lives for one statement.
        self.values: dict[k.Expr, ir.Value] = {}
        # Values computed once before the task's loop (llvm_invariants), for every statement in it.
        self.invariants: dict[k.Expr, ir.Value] = {}
        self.loops: list[tuple[ir.Block, ir.Block]] = []  # (continue target, break target)
        self.pairwise = PairwiseSums(self, blocked_sums(task))

    # --- parameters ---------------------------------------------------------------------------
    def field(self, param: k.Param, what: str, axis: int = 0) -> ir.Value:
        """A field of the argument block (data, extent, stride, scalar value), loaded once."""
        key = (param.name, what, axis)
        if key not in self.fields:
            offset = {"data": 0, "scalar": 0, "extent": 1 + axis, "stride": 1 + getattr(param, "ndim", 0) + axis}
            slot_index = self.layout.slots[param.name] + offset[what]
            slot = self.entry_builder.gep(self.fn.args[2], [I64(slot_index)], inbounds=True)
            self.fields[key] = self._load_field(param, what, slot)
        return self.fields[key]

    def _load_field(self, param: k.Param, what: str, slot: ir.Value) -> ir.Value:
        eb = self.entry_builder
        if what == "data":
            return eb.inttoptr(eb.load(slot), ir.PointerType(MEMORY_TYPE[param.dtype.name]))
        if what in ("extent", "stride"):
            return eb.load(slot)
        storage = eb.bitcast(slot, ir.PointerType(MEMORY_TYPE[param.dtype.name]))
        value = eb.load(storage)
        return eb.trunc(value, I1) if param.dtype.is_bool else value

    def address(self, param: k.ArrayParam, indices: tuple[k.Expr, ...]) -> ir.Value:
        return self.b.gep(self.field(param, "data"), [self.offset(param, indices)])

    def offset(self, param: k.ArrayParam, indices: tuple[k.Expr, ...]) -> ir.Value:
        """The element offset of `indices` from the array's first element."""
        offset = None
        for axis, index in enumerate(indices):
            stride = param.static_stride(axis)
            if stride == 0:
                continue
            i = self.to_i64(self.expr(index), index.dtype)
            term = i if stride == 1 else self.b.mul(i, I64(stride) if stride is not None
                                                        else self.field(param, "stride", axis))
            offset = term if offset is None else self.b.add(offset, term)
        return offset if offset is not None else I64(0)

    def to_i64(self, value: ir.Value, dtype: DType) -> ir.Value:
        if dtype.itemsize == 8:
            return value
        return self.b.zext(value, I64) if dtype.is_unsigned or dtype.is_bool else self.b.sext(value, I64)

    # --- expressions ----------------------------------------------------------------------------
    def expr(self, e: k.Expr) -> ir.Value:
        value = self.invariants.get(e)
        if value is None:
            value = self.values.get(e)
        if value is None:
            value = self.values[e] = _EXPR[type(e)](self, e)
        return value

    def const(self, value, dtype: DType) -> ir.Value:
        if dtype.name == "bfloat16":
            return RULES["__bf16_bits"](self, [ir.Constant(F32, float(value))], [dt.float32], dtype, {})
        ty = register_type(dtype)
        if dtype.is_floating:  # round through the dtype first: 1e6 as float16 is inf, not an error
            with np.errstate(over="ignore"):
                return ir.Constant(ty, float(dtype.numpy.type(value)))
        bits = dtype.itemsize * 8
        return ir.Constant(ty, (int(value) + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1)))  # the bit pattern

    def load_memory(self, pointer: ir.Value, dtype: DType) -> ir.Value:
        value = self.b.load(pointer)
        return self.b.icmp_unsigned("!=", value, I8(0)) if dtype.is_bool else value

    def store_memory(self, pointer: ir.Value, value: ir.Value, dtype: DType) -> None:
        self.b.store(self.b.zext(value, I8) if dtype.is_bool else value, pointer)

    def apply(self, op: str, args: list[k.Expr], out: DType, attrs: dict | None = None) -> ir.Value:
        rule = RULES.get(op)
        if rule is None:
            raise UnsupportedError(f"LLVM codegen: op {op!r} has no LLVM rule")
        return rule(self, [self.expr(a) for a in args], [a.dtype for a in args], out, attrs or {})

    def var_slot(self, var: k.Var) -> ir.Value:
        if var not in self.vars:
            self.vars[var] = self.entry_builder.alloca(register_type(var.dtype), name=var.name)
        return self.vars[var]

    # --- statements -----------------------------------------------------------------------------
    def block(self, stmts: tuple[k.Stmt, ...]) -> None:
        for s in stmts:
            if self.b.block.is_terminated:
                return  # code after break/continue is unreachable
            self.values = {}
            _STMT[type(s)](self, s)

    def loop(self, var: k.Var, begin: ir.Value, end: ir.Value, step: int, body: Callable[[], None]) -> None:
        """`for var in range(begin, end, step)` with the index in `var`."""
        slot = self.var_slot(var)
        self.b.store(begin, slot)
        head, inner, latch, after = (self.fn.append_basic_block(n) for n in ("head", "loop", "latch", "after"))
        self.b.branch(head)
        self.b.position_at_end(head)
        i = self.b.load(slot)
        compare = "<" if step > 0 else ">"
        self.b.cbranch(self.b.icmp_signed(compare, i, end), inner, after)
        self.b.position_at_end(inner)
        self.loops.append((latch, after))
        body()
        self.loops.pop()
        if not self.b.block.is_terminated:
            self.b.branch(latch)
        self.b.position_at_end(latch)
        self.b.store(self.b.add(self.b.load(slot), ir.Constant(slot.type.pointee, step)), slot)
        self.b.branch(head)
        self.b.position_at_end(after)

    def finish(self) -> None:
        if not self.b.block.is_terminated:
            self.b.ret_void()
        self.entry_builder.branch(self.fn.blocks[1])


def _emit_load(cg: TaskEmitter, e: k.Load) -> ir.Value:
    return cg.load_memory(cg.address(e.param, e.indices), e.param.dtype)


def _emit_load_local(cg: TaskEmitter, e: k.LoadLocal) -> ir.Value:
    pointer = cg.b.gep(cg.vars[e.array], [cg.to_i64(cg.expr(e.index), e.index.dtype)])
    return cg.load_memory(pointer, e.dtype)


_EXPR: dict[type, Callable[[TaskEmitter, k.Expr], ir.Value]] = {
    k.Const: lambda cg, e: cg.const(e.value, e.dtype),
    k.Var: lambda cg, e: cg.b.load(cg.var_slot(e)),
    k.ScalarRef: lambda cg, e: cg.field(e.param, "scalar"),
    k.ArrayExtent: lambda cg, e: cg.field(e.param, "extent", e.axis),
    k.ArrayStride: lambda cg, e: cg.field(e.param, "stride", e.axis),
    k.Load: _emit_load,
    k.LoadLocal: _emit_load_local,
    k.Unary: lambda cg, e: cg.apply(e.op, [e.x], e.dtype, dict(e.attrs)),
    k.Binary: lambda cg, e: cg.apply(e.op, [e.a, e.b], e.dtype),
    k.Ternary: lambda cg, e: cg.apply(e.op, [e.a, e.b, e.c], e.dtype),
    k.Cast: lambda cg, e: cg.apply("cast", [e.x], e.dtype),
    k.Philox: lambda cg, e: RULES["__philox"](cg, [cg.expr(x) for x in (e.seed, e.offset, e.group, e.word)],
                                              [x.dtype for x in (e.seed, e.offset, e.group, e.word)], e.dtype, {}),
}


def _emit_if(cg: TaskEmitter, s: k.If) -> None:
    then_block, else_block, after = (cg.fn.append_basic_block(n) for n in ("then", "else", "endif"))
    cg.b.cbranch(cg.expr(s.cond), then_block, else_block)
    for block, body in ((then_block, s.then), (else_block, s.orelse)):
        cg.b.position_at_end(block)
        cg.block(body)
        if not cg.b.block.is_terminated:
            cg.b.branch(after)
    cg.b.position_at_end(after)


def _emit_while(cg: TaskEmitter, s: k.While) -> None:
    head, body, after = (cg.fn.append_basic_block(n) for n in ("while", "do", "endwhile"))
    cg.b.branch(head)
    cg.b.position_at_end(head)
    cg.b.cbranch(cg.expr(s.cond), body, after)
    cg.b.position_at_end(body)
    cg.loops.append((head, after))
    cg.block(s.body)
    cg.loops.pop()
    if not cg.b.block.is_terminated:
        cg.b.branch(head)
    cg.b.position_at_end(after)


def _emit_alloc(cg: TaskEmitter, s: k.Alloc) -> None:
    array_type = ir.ArrayType(MEMORY_TYPE[s.dtype.name], s.size)
    storage = cg.entry_builder.alloca(array_type, name=s.var.name)
    cg.vars[s.var] = cg.entry_builder.gep(storage, [I64(0), I64(0)], inbounds=True)


def _emit_store_local(cg: TaskEmitter, s: k.StoreLocal) -> None:
    pointer = cg.b.gep(cg.vars[s.array], [cg.to_i64(cg.expr(s.index), s.index.dtype)])
    cg.store_memory(pointer, cg.expr(s.value), s.value.dtype)


def _emit_atomic(cg: TaskEmitter, s: k.AtomicRMW) -> None:
    pointer = cg.address(s.param, s.indices)
    value = cg.expr(s.value)
    floating = s.param.dtype.is_floating
    op = {("add", False): "add", ("sub", False): "sub", ("min", False): "min", ("max", False): "max",
          ("add", True): "fadd", ("sub", True): "fsub", ("min", True): "fmin", ("max", True): "fmax"}[(s.op, floating)]
    if s.param.dtype.is_unsigned and op in ("min", "max"):
        op = "u" + op
    if llvm_private.emit_private_update(cg, s, op, value):
        return
    old = cg.b.atomic_rmw(op, pointer, value, "seq_cst")
    if s.result is not None:
        cg.b.store(old, cg.var_slot(s.result))


_STMT: dict[type, Callable[[TaskEmitter, k.Stmt], None]] = {
    k.Let: lambda cg, s: cg.pairwise.define(s) or cg.b.store(cg.expr(s.value), cg.var_slot(s.var)),
    k.Assign: lambda cg, s: cg.b.store(cg.expr(s.value), cg.var_slot(s.var)),
    k.Store: lambda cg, s: cg.store_memory(cg.address(s.param, s.indices), cg.expr(s.value), s.param.dtype),
    k.StoreLocal: _emit_store_local,
    k.AtomicRMW: _emit_atomic,
    k.If: _emit_if,
    k.For: lambda cg, s: cg.pairwise.loop(s) or cg.loop(s.var, cg.expr(s.begin), cg.expr(s.end), s.step,
                                                      lambda: cg.block(s.body)),
    k.While: _emit_while,
    k.Break: lambda cg, s: cg.b.branch(cg.loops[-1][1]),
    k.Continue: lambda cg, s: cg.b.branch(cg.loops[-1][0]),
    k.Alloc: _emit_alloc,
    k.Sync: lambda cg, s: None,  # one CPU thread runs a whole task range: nothing to wait for
    k.Assert: lambda cg, s: _emit_assert(cg, s),
}


def _emit_assert(cg: TaskEmitter, s: k.Assert) -> None:
    """A failed assert records its message number in the status array and returns from the task."""
    status = next((p for p in cg.kernel.params if p.name == k.ASSERT_STATUS), None)
    if status is None:
        raise UnsupportedError(f"kernel {cg.kernel.name!r} has asserts but no {k.ASSERT_STATUS!r} parameter")
    if "assert_codes" not in cg.__dict__:
        cg.assert_codes = {m: n + 1 for n, m in enumerate(k.assert_messages(cg.kernel))}
    ok, fail = cg.fn.append_basic_block("assert_ok"), cg.fn.append_basic_block("assert_fail")
    cg.b.cbranch(cg.expr(s.cond), ok, fail)
    cg.b.position_at_end(fail)
    cg.b.store(I64(cg.assert_codes[s.message]), cg.field(status, "data"))
    cg.b.ret_void()
    cg.b.position_at_end(ok)


def emit_task(module: ir.Module, kernel: k.Kernel, task: k.Task, layout: ArgLayout, fast_math: bool,
              reverse_order: bool = False) -> None:
    cg = TaskEmitter(module, kernel, task, layout, fast_math)
    lo, hi = cg.fn.args[0], cg.fn.args[1]
    if task.kind == "range_for":
        index = task.var.dtype
        begin = lo if index.itemsize == 8 else cg.b.trunc(lo, register_type(index))
        end = hi if index.itemsize == 8 else cg.b.trunc(hi, register_type(index))
        llvm_private.open_private_copies(cg, llvm_private.privatizable(task), lo, hi)
        _loop_with_invariants(cg, task, begin, end, reverse_order)
        llvm_private.close_private_copies(cg)
    else:
        cg.block(task.body)
    cg.finish()


def _loop_with_invariants(cg: TaskEmitter, task: k.Task, begin: ir.Value, end: ir.Value, reverse_order: bool) -> None:
    """The task's loop, its index-invariant values (llvm_invariants) computed once before it where
    the range is not empty."""
    hoisted = llvm_invariants.task_invariants(task)
    if not hoisted:
        _task_loop(cg, task, begin, end, reverse_order)
        return
    before, done = cg.fn.append_basic_block("invariants"), cg.fn.append_basic_block("done")
    cg.b.cbranch(cg.b.icmp_signed("<", begin, end), before, done)
    cg.b.position_at_end(before)
    cg.values = {}
    for e in hoisted:
        cg.invariants[e] = cg.expr(e)
    _task_loop(cg, task, begin, end, reverse_order)
    cg.b.branch(done)
    cg.b.position_at_end(done)


def _task_loop(cg: TaskEmitter, task: k.Task, begin: ir.Value, end: ir.Value, reverse_order: bool) -> None:
    """The loop over the task's indices [begin, end): from last to first under `reverse_parallel`,
    the order no correct kernel's answer depends on and a race's usually does."""
    if not reverse_order:
        cg.loop(task.var, begin, end, 1, lambda: cg.block(task.body))
        return
    one = ir.Constant(begin.type, 1)
    cg.loop(task.var, cg.b.sub(end, one), cg.b.sub(begin, one), -1, lambda: cg.block(task.body))


def generate(kernel: k.Kernel, fast_math: bool = False, reverse_order: bool = False) -> str:
    """The LLVM IR text of `kernel`: one function per task, named after the task; `reverse_order`:
    each parallel task's loop runs its range from its last index to its first."""
    module = ir.Module(name=kernel.name)
    module.triple = ""  # the CPU runtime sets the host triple
    layout = ArgLayout.of(kernel.params)
    for task in kernel.tasks:
        emit_task(module, kernel, task, layout, fast_math, reverse_order)
    llvm_math.isolate_tables(module)
    return str(module)
