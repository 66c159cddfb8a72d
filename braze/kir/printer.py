"""A stable text form of Kernel IR (`BRAZE_DUMP=kernel_ir`, golden tests)."""

from __future__ import annotations

from collections.abc import Callable

from braze.kir import nodes as k


def _expr_const(e: k.Const) -> str:
    return repr(e.value) if e.dtype.is_bool or e.dtype.name in ("int64",) else f"{e.value!r}:{e.dtype.name}"


_EXPR: dict[type, Callable] = {
    k.Const: _expr_const,
    k.Var: lambda e: e.name,
    k.ScalarRef: lambda e: e.param.name,
    k.ArrayExtent: lambda e: f"{e.param.name}.shape[{e.axis}]",
    k.ArrayStride: lambda e: f"{e.param.name}.stride[{e.axis}]",
    k.Load: lambda e: f"{e.param.name}[{', '.join(map(expr, e.indices))}]",
    k.LoadLocal: lambda e: f"{e.array.name}[{expr(e.index)}]",
    k.Unary: lambda e: f"{e.op}({expr(e.x)}{''.join(f', {a}={v!r}' for a, v in e.attrs)})",
    k.Binary: lambda e: f"{e.op}({expr(e.a)}, {expr(e.b)})",
    k.Ternary: lambda e: f"{e.op}({expr(e.a)}, {expr(e.b)}, {expr(e.c)})",
    k.Cast: lambda e: f"{e.dtype.name}({expr(e.x)})",
    k.Philox: lambda e: f"philox({expr(e.seed)}, {expr(e.offset)}, {expr(e.group)})[{expr(e.word)}]",
}


def expr(e: k.Expr) -> str:
    return _EXPR[type(e)](e)


def _block(stmts, depth: int) -> list[str]:
    return [line for s in stmts for line in stmt(s, depth)]


def stmt(s: k.Stmt, depth: int = 0) -> list[str]:
    pad = "  " * depth
    match s:
        case k.Let(var, value):
            return [f"{pad}{var.name}: {var.dtype.name} = {expr(value)}"]
        case k.Assign(var, value):
            return [f"{pad}{var.name} = {expr(value)}"]
        case k.Store(param, indices, value):
            return [f"{pad}{param.name}[{', '.join(map(expr, indices))}] = {expr(value)}"]
        case k.StoreLocal(array, index, value):
            return [f"{pad}{array.name}[{expr(index)}] = {expr(value)}"]
        case k.AtomicRMW(op, param, indices, value, result):
            target = f"{result.name} = " if result else ""
            return [f"{pad}{target}atomic_{op}({param.name}[{', '.join(map(expr, indices))}], {expr(value)})"]
        case k.If(cond, then, orelse):
            lines = [f"{pad}if {expr(cond)}:", *_block(then, depth + 1)]
            return lines + ([f"{pad}else:", *_block(orelse, depth + 1)] if orelse else [])
        case k.For(var, begin, end, body, step, vectorize):
            hint = "  # vectorize" if vectorize else ""
            step_text = f", {step}" if step != 1 else ""
            return [f"{pad}for {var.name} in range({expr(begin)}, {expr(end)}{step_text}):{hint}",
                    *_block(body, depth + 1)]
        case k.While(cond, body):
            return [f"{pad}while {expr(cond)}:", *_block(body, depth + 1)]
        case k.Alloc(var, dtype, size, memory):
            return [f"{pad}{var.name} = alloc_{memory}({dtype.name}, {size})"]
        case k.Break():
            return [f"{pad}break"]
        case k.Continue():
            return [f"{pad}continue"]
        case k.Sync():
            return [f"{pad}sync()"]
        case k.Assert(cond, message):
            return [f"{pad}assert {expr(cond)}, {message!r}"]
    raise TypeError(f"kernel IR printer: unknown statement {type(s).__name__}")


def _param(p: k.Param) -> str:
    if isinstance(p, k.ScalarParam):
        return f"{p.name}: {p.dtype.name}"
    strides = "" if not p.static_strides else f" strides={tuple('?' if s is None else s for s in p.static_strides)}"
    return f"{p.name}: {p.dtype.name}[{p.ndim}d]{strides}"


def kernel(kern: k.Kernel) -> str:
    index = f" index {kern.index_type.name}" if kern.index_type.name != "int64" else ""
    lines = [f"kernel {kern.name}({', '.join(map(_param, kern.params))}){index}:"]
    for task in kern.tasks:
        if task.kind == "range_for":
            block = f", block_dim={task.block_dim}" if task.block_dim else ""
            block += f", tile={task.tile}" if task.tile else ""
            lines.append(f"  task {task.name}: range_for {task.var.name} in [{expr(task.begin)}, "
                         f"{expr(task.end)}){block}")
        else:
            lines.append(f"  task {task.name}: serial")
        lines += _block(task.body, 2)
    return "\n".join(lines)
