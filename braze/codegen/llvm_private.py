"""Atomic updates privatized per CPU thread: a histogram or an energy sum adds into a copy of its
small target on the thread's stack, then adds that copy into the array once, when the thread's
range of the task is done.

A CPU task function runs one range [lo, hi) on one thread, so within the range nothing else
touches the private copy. An array qualifies when every access the task makes to it is an atomic
`add` or `sub` whose old value is unused; at run time its elements must lie within PRIVATE_ELEMENTS
of its first (non-negative strides) and the range must be long enough to pay for clearing and
adding back the copy. Otherwise the updates stay atomic on the array. Float sums then add in
another order, as atomics from several threads do anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llvmlite import ir

from braze.kir import nodes as k

if TYPE_CHECKING:
    from braze.codegen.llvm import TaskEmitter

I1, I64 = ir.IntType(1), ir.IntType(64)

PRIVATE_ELEMENTS = 4096  # the largest target copied (32 KiB of int64 or float64 on the stack)
INDICES_PER_ELEMENT = 4  # a range privatizes when it has this many indices per element to clear and add back
_PRIVATE_OPS = ("add", "sub")


@dataclass
class PrivateCopy:
    """The stack copy of one array's updates in a task function."""

    storage: ir.Value  # pointer to the first element
    used: ir.Value  # i1: this range updates the copy (else the array, atomically)
    span: ir.Value  # i64: elements from the array's first to its last, plus one


def privatizable(task: k.Task) -> list[k.ArrayParam]:
    """The arrays the task only updates atomically with add or sub, ignoring the old value."""
    updated: dict[str, k.ArrayParam] = {}
    other: set[str] = set()
    for s in _statements(task.body):
        if isinstance(s, k.AtomicRMW) and s.op in _PRIVATE_OPS and s.result is None \
                and s.param.dtype.name in ("int32", "int64", "float32", "float64"):
            updated[s.param.name] = s.param
        elif isinstance(s, (k.AtomicRMW, k.Store)):
            other.add(s.param.name)
    for e in _expressions(task.body):
        if isinstance(e, k.Load):
            other.add(e.param.name)
    return [p for name, p in updated.items() if name not in other]


def open_private_copies(cg: TaskEmitter, params: list[k.ArrayParam], lo: ir.Value, hi: ir.Value) -> None:
    """Before the task's loop: each copy cleared, where this range uses it."""
    cg.private = {}
    for param in params:
        span, fits = _span(cg, param)
        long_enough = cg.b.icmp_signed(">=", cg.b.sub(hi, lo), cg.b.mul(span, I64(INDICES_PER_ELEMENT)))
        used = cg.b.and_(fits, long_enough)
        element = cg.field(param, "data").type.pointee
        array = cg.entry_builder.alloca(ir.ArrayType(element, PRIVATE_ELEMENTS), name=f"{param.name}_private")
        storage = cg.entry_builder.gep(array, [I64(0), I64(0)], inbounds=True)
        with cg.b.if_then(used):
            _memset_zero(cg, storage, cg.b.mul(span, I64(param.dtype.itemsize)))
        cg.private[param.name] = PrivateCopy(storage, used, span)


def emit_private_update(cg: TaskEmitter, s: k.AtomicRMW, op: str, value: ir.Value) -> bool:
    """`s` into the thread's copy where this range uses one; False when `s` has no copy."""
    copy = getattr(cg, "private", {}).get(s.param.name)
    if copy is None or s.result is not None:
        return False
    with cg.b.if_else(copy.used) as (private, shared):
        with private:
            pointer = cg.b.gep(copy.storage, [cg.offset(s.param, s.indices)])
            combine = {"add": cg.b.add, "sub": cg.b.sub, "fadd": cg.b.fadd, "fsub": cg.b.fsub}[op]
            cg.b.store(combine(cg.b.load(pointer), value), pointer)
        with shared:
            cg.b.atomic_rmw(op, cg.address(s.param, s.indices), value, "seq_cst")
    return True


def close_private_copies(cg: TaskEmitter) -> None:
    """After the task's loop: each used copy added into its array, one atomic add per element."""
    for name, copy in getattr(cg, "private", {}).items():
        param = next(p for p in cg.kernel.params if p.name == name)
        with cg.b.if_then(copy.used):
            _add_back(cg, param, copy, "fadd" if param.dtype.is_floating else "add")


def _add_back(cg: TaskEmitter, param: k.ArrayParam, copy: PrivateCopy, op: str) -> None:
    slot = cg.entry_builder.alloca(I64, name=f"{param.name}_private_i")
    cg.b.store(I64(0), slot)
    head, body, after = (cg.fn.append_basic_block(f"{param.name}_add_back_{n}") for n in ("head", "body", "after"))
    cg.b.branch(head)
    cg.b.position_at_end(head)
    i = cg.b.load(slot)
    cg.b.cbranch(cg.b.icmp_signed("<", i, copy.span), body, after)
    cg.b.position_at_end(body)
    partial = cg.b.load(cg.b.gep(copy.storage, [i]))
    zero = ir.Constant(partial.type, 0)
    nonzero = cg.b.fcmp_unordered("!=", partial, zero) if op == "fadd" else cg.b.icmp_signed("!=", partial, zero)
    with cg.b.if_then(nonzero):  # untouched elements cost no atomic
        cg.b.atomic_rmw(op, cg.b.gep(cg.field(param, "data"), [i]), partial, "seq_cst")
    cg.b.store(cg.b.add(i, I64(1)), slot)
    cg.b.branch(head)
    cg.b.position_at_end(after)


def _span(cg: TaskEmitter, param: k.ArrayParam) -> tuple[ir.Value, ir.Value]:
    """(elements from the first to the last plus one, whether the copy can hold them): every stride
    non-negative and the span within PRIVATE_ELEMENTS. An empty array spans nothing."""
    span, fits = I64(1), ir.Constant(I1, 1)
    for axis in range(param.ndim):
        extent, stride = cg.field(param, "extent", axis), cg.field(param, "stride", axis)
        span = cg.b.add(span, cg.b.mul(cg.b.sub(extent, I64(1)), stride))
        fits = cg.b.and_(fits, cg.b.icmp_signed(">=", stride, I64(0)))
    fits = cg.b.and_(fits, cg.b.icmp_signed("<=", span, I64(PRIVATE_ELEMENTS)))
    return span, fits


def _memset_zero(cg: TaskEmitter, pointer: ir.Value, nbytes: ir.Value) -> None:
    i8p = ir.PointerType(ir.IntType(8))
    memset = cg.module.declare_intrinsic("llvm.memset", [i8p, I64])
    cg.b.call(memset, [cg.b.bitcast(pointer, i8p), ir.Constant(ir.IntType(8), 0), nbytes, ir.Constant(I1, 0)])


def _statements(stmts: tuple[k.Stmt, ...]):
    for s in stmts:
        yield s
        for child in ("body", "then", "orelse"):
            yield from _statements(getattr(s, child, ()))


def _expressions(stmts: tuple[k.Stmt, ...]):
    for s in _statements(stmts):
        for value in vars(s).values():
            for e in value if isinstance(value, tuple) else (value,):
                if isinstance(e, k.Expr):
                    yield from _walk(e)


def _walk(e: k.Expr):
    yield e
    for value in vars(e).values():
        for child in value if isinstance(value, tuple) else (value,):
            if isinstance(child, k.Expr):
                yield from _walk(child)
