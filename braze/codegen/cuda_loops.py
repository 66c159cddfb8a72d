"""CUDA C++ for loop kernels (`@bz.kernel`): one `__global__` function per task of the Kernel IR.

    extern "C" __global__ void __launch_bounds__(256)
    step_t0(const BzArgs<17> bz_args) {
      float* const x = (float*)bz_args.s[0];
      ...
      const long long bz_begin = 0LL, bz_end = x_shape0;
      for (long long i = bz_begin + ...; i < bz_end; i += ...) {   // a parallel task
        ... the task body, statement for statement ...
      }
    }

A parallel task is a grid-stride loop over its index range (a `bz.ndrange` arrives flattened to
one index), so one compiled function serves any extents and the runtime may cap the grid at what
the GPU holds at once. A serial task runs its body once: the runtime launches it as one thread.
Every function takes the packed argument block of the CPU backend (`ArgLayout`) by value, and
reads the task bounds from it on the device, as the CPU code does.

Names come from the Python source (`cuda_names` renames those C++ cannot take). C++ scopes are
narrower than Python's: a local first assigned inside an `if` and read after it, or a loop index
read after its loop, is declared at the top of the task body instead. Which names need that is
found by writing the task once and noting the names read outside their declaration's scope.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from braze.codegen.cuda import (
    DEFAULT_BLOCK_SIZE,
    RULES,
    CudaProgram,
    c_type,
    const_text,
    scalar_from_slot,
    with_prelude,
)
from braze.codegen.cuda_names import Names, is_reserved
from braze.codegen.cuda_plan import walk
from braze.dtypes import DType
from braze.errors import UnsupportedError
from braze.kir import nodes as k
from braze.kir.layout import ArgLayout

ARGS = "bz_args"  # the packed argument block, a kernel parameter
MAX_PARAM_BYTES = 4096  # the kernel parameter space every CUDA version and architecture gives


@dataclass(frozen=True)
class LoopCudaSource:
    """The generated translation unit of a loop kernel: the prelude, then one `__global__` per task
    (`functions[i]` is task i's function name)."""

    body: str
    functions: tuple[str, ...]

    @property
    def text(self) -> str:
        return with_prelude(self.body)

    def programs(self, most_chars: int) -> tuple[CudaProgram, ...]:
        """One program: a loop kernel's tasks are a user's few functions (CudaSource.programs splits)."""
        return (CudaProgram(self.text, self.functions),)


class LoopTaskWriter:
    """Writes one task as one `__global__` function; `hoisted` locals are declared at its top."""

    def __init__(self, kernel: k.Kernel, task: k.Task, function: str, layout: ArgLayout, block_size: int,
                 restrict: bool, hoisted: frozenset[k.Var] = frozenset()) -> None:
        self.kernel, self.task, self.function, self.layout = kernel, task, function, layout
        self.block_size, self.restrict, self.hoisted = block_size, restrict, hoisted
        self.names = Names()
        for p in kernel.params:  # parameters keep their names first
            self.names(("param", p.name), p.name)
        self.lines: list[str] = []
        self.depth = 1
        self.scopes: list[set[k.Var]] = []
        self.loops = 0  # serial loops around the current statement
        self.missing: set[k.Var] = set()  # read or assigned where no declaration is in scope
        self.fields: dict[tuple[str, str, int], str] = {}  # (param, "shape"/"stride", axis) -> identifier
        self.used: set[str] = set()  # parameters the body reads or writes
        self.written = {s.param.name for s in walk(task.body) if isinstance(s, (k.Store, k.AtomicRMW))}
        if any(isinstance(s, k.Assert) for s in walk(task.body)):
            self.written.add(k.ASSERT_STATUS)
        self.assert_codes = {m: n + 1 for n, m in enumerate(k.assert_messages(kernel))}

    # --- text ------------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def open_block(self, header: str, body: tuple[k.Stmt, ...], declared: tuple[k.Var, ...] = ()) -> None:
        """`header {` and the body in a scope of its own (holding `declared`); the caller closes it."""
        self.line(header + " {")
        self.depth += 1
        self.scopes.append(set(declared))
        self.block(body)
        self.scopes.pop()
        self.depth -= 1

    def nested(self, header: str, body: tuple[k.Stmt, ...], declared: tuple[k.Var, ...] = ()) -> None:
        self.open_block(header, body, declared)
        self.line("}")

    # --- names -----------------------------------------------------------------------------------
    def param(self, p: k.Param) -> str:
        self.used.add(p.name)
        return self.names(("param", p.name), p.name)

    def field(self, p: k.ArrayParam, what: str, axis: int) -> str:
        """An extent or stride of an array parameter, read once at the top of the function."""
        key = (p.name, what, axis)
        if key not in self.fields:
            self.fields[key] = self.names(("field", *key), f"{self.param(p)}_{what}{axis}")
        self.used.add(p.name)
        return self.fields[key]

    def var(self, v: k.Var) -> str:
        if v not in self.hoisted and not any(v in scope for scope in self.scopes):
            self.missing.add(v)
        return self.names(("var", v.name), v.name)

    def declares(self, v: k.Var) -> bool:
        """Whether a definition of `v` here is a declaration (else an assignment)."""
        return v not in self.hoisted and not any(v in scope for scope in self.scopes)

    def define(self, v: k.Var, value: str) -> None:
        if self.declares(v):
            self.scopes[-1].add(v)
            self.line(f"{c_type(v.dtype)} {self.var(v)} = {value};")
        else:
            self.line(f"{self.var(v)} = {value};")

    # --- expressions -----------------------------------------------------------------------------
    def expr(self, e: k.Expr) -> str:
        writer = _EXPR.get(type(e))
        if writer is None:
            raise UnsupportedError(f"CUDA codegen of loop kernels: {type(e).__name__} expressions are not supported")
        return writer(self, e)

    def apply(self, op: str, args: list[k.Expr], out: DType, attrs: dict | None = None) -> str:
        rule = RULES.get(op)
        if rule is None:
            raise UnsupportedError(f"CUDA codegen: op {op!r} has no CUDA rule")
        return rule([self.expr(a) for a in args], [a.dtype for a in args], out, attrs or {})

    def element(self, p: k.ArrayParam, indices: tuple[k.Expr, ...]) -> str:
        """`x[i * x_stride0 + j]`: a static unit stride multiplies nothing, a static 0 drops the index."""
        terms = []
        for axis, index in enumerate(indices):
            stride = p.static_stride(axis)
            if stride == 0:
                continue
            i = self.expr(index) if index.dtype.itemsize == 8 else f"(long long)({self.expr(index)})"
            step = stride if stride is not None else self.field(p, "stride", axis)
            terms.append(i if stride == 1 else f"{i} * {step}")
        return f"{self.param(p)}[{' + '.join(terms) or '0'}]"

    # --- statements ------------------------------------------------------------------------------
    def block(self, stmts: tuple[k.Stmt, ...]) -> None:
        for s in stmts:
            writer = _STMT.get(type(s))
            if writer is None:
                raise UnsupportedError(f"CUDA codegen of loop kernels: {type(s).__name__} statements are not supported")
            writer(self, s)

    def emit_if(self, s: k.If) -> None:
        header = f"if ({self.expr(s.cond)})"
        while True:
            self.open_block(header, s.then)
            if len(s.orelse) == 1 and isinstance(s.orelse[0], k.If):  # elif
                s = s.orelse[0]
                header = f"}} else if ({self.expr(s.cond)})"
                continue
            if s.orelse:
                self.open_block("} else", s.orelse)
            self.line("}")
            return

    def emit_for(self, s: k.For) -> None:
        declared = self.declares(s.var)
        name = self.var(s.var) if not declared else self.names(("var", s.var.name), s.var.name)
        init = f"{c_type(s.var.dtype)} {name}" if declared else name
        step = f"++{name}" if s.step == 1 else f"{name} += {s.step}"
        header = f"for ({init} = {self.expr(s.begin)}; {name} {'<' if s.step > 0 else '>'} {self.expr(s.end)}; {step})"
        self.loops += 1
        self.nested(header, s.body, declared=(s.var,) if declared else ())
        self.loops -= 1

    def emit_while(self, s: k.While) -> None:
        self.loops += 1
        self.nested(f"while ({self.expr(s.cond)})", s.body)
        self.loops -= 1

    def emit_jump(self, s: k.Stmt) -> None:
        word = "break" if isinstance(s, k.Break) else "continue"
        # At task level a `continue` moves to the thread's next index; a `break` would stop the thread.
        if not self.loops and (word == "break" or self.task.kind != "range_for"):
            raise UnsupportedError(f"CUDA codegen of loop kernels: {word} outside a serial loop")
        self.line(f"{word};")

    def emit_atomic(self, s: k.AtomicRMW) -> None:
        call = f"bz_atomic_{s.op}(&{self.element(s.param, s.indices)}, {self.expr(s.value)})"
        if s.result is None:
            self.line(f"{call};")
        else:
            self.define(s.result, call)

    def emit_assert(self, s: k.Assert) -> None:
        """A failed check records its message's number (the first failure wins) and ends the thread,
        as the CPU code ends the task: the runtime reads the number after the launch."""
        status = next(p for p in self.kernel.params if p.name == k.ASSERT_STATUS)
        code = self.assert_codes[s.message]
        self.line(f"if (!({self.expr(s.cond)})) {{ bz_assert_failed({self.param(status)}, {code}); return; }}"
                  f"  // {_comment(s.message)}")

    def emit_alloc(self, s: k.Alloc) -> None:
        if s.memory != "local":
            raise UnsupportedError("CUDA codegen of loop kernels: shared memory is not supported")
        self.scopes[-1].add(s.var)
        self.line(f"{c_type(s.dtype)} {self.var(s.var)}[{s.size}];")

    # --- the function ----------------------------------------------------------------------------
    def write(self) -> str:
        t = self.task
        self.scopes.append(set())
        if t.kind == "range_for":
            self.write_grid_stride_loop()
        else:
            self.line("// a serial task: the runtime launches one thread")
            self.declare_hoisted()
            self.block(t.body)
        self.scopes.pop()
        body, self.lines = self.lines, []
        self.declare_params()
        header = [f"extern \"C\" __global__ void __launch_bounds__({self.block_size})",
                  f"{self.function}(const BzArgs<{max(self.layout.size, 1)}> {ARGS}) {{"]
        return "\n".join(header + self.lines + body + ["}"])

    def write_grid_stride_loop(self) -> None:
        t = self.task
        begin, end = self.expr(t.begin), self.expr(t.end)
        self.line(f"const long long bz_begin = {begin}, bz_end = {end};")
        self.line(f"for ({c_type(t.var.dtype)} {self.names(('var', t.var.name), t.var.name)} = bz_begin + "
                  "(long long)blockIdx.x * blockDim.x + threadIdx.x;")
        self.line(f"     {self.names(('var', t.var.name), t.var.name)} < bz_end; "
                  f"{self.names(('var', t.var.name), t.var.name)} += (long long)gridDim.x * blockDim.x) {{")
        self.depth += 1
        self.scopes.append({t.var})
        self.declare_hoisted()
        self.block(t.body)
        self.scopes.pop()
        self.depth -= 1
        self.line("}")

    def declare_hoisted(self) -> None:
        for v in sorted(self.hoisted, key=lambda v: v.name):
            self.line(f"{c_type(v.dtype)} {self.names(('var', v.name), v.name)} = {const_text(0, v.dtype)};")

    def declare_params(self) -> None:
        """Pointers, extents, strides and scalars the body uses, read from the argument block."""
        for p in self.kernel.params:
            if p.name not in self.used:
                continue
            slot = self.layout.slots[p.name]
            name = self.names(("param", p.name), p.name)
            if isinstance(p, k.ScalarParam):
                self.line(f"const {c_type(p.dtype)} {name} = {scalar_from_slot(f'{ARGS}.s[{slot}]', p.dtype)};")
                continue
            ty = c_type(p.dtype)
            # With no two arrays sharing memory, written arrays are restrict too: a store to one
            # then no longer forces reloading the others, so a fused body keeps each element in a
            # register between its loops instead of a chain of dependent round trips to memory.
            restrict = " __restrict__" if self.restrict else ""
            const = "" if p.name in self.written else "const "
            self.line(f"{const}{ty}*{restrict} const {name} = ({const}{ty}*){ARGS}.s[{slot}];")
            for (owner, what, axis), field in self.fields.items():
                if owner == p.name:
                    at = slot + 1 + axis + (p.ndim if what == "stride" else 0)
                    self.line(f"const long long {field} = {ARGS}.s[{at}];")


def _comment(text: str) -> str:
    return " ".join(text.replace("*/", "* /").split())[:160]


def _let(w: LoopTaskWriter, s: k.Let) -> None:
    w.define(s.var, w.expr(s.value))


def _assign(w: LoopTaskWriter, s: k.Assign) -> None:
    w.line(f"{w.var(s.var)} = {w.expr(s.value)};")


def _store(w: LoopTaskWriter, s: k.Store) -> None:
    w.line(f"{w.element(s.param, s.indices)} = {w.expr(s.value)};")


def _store_local(w: LoopTaskWriter, s: k.StoreLocal) -> None:
    w.line(f"{w.var(s.array)}[{w.expr(s.index)}] = {w.expr(s.value)};")


def _unsupported_sync(w: LoopTaskWriter, s: k.Sync) -> None:
    raise UnsupportedError("CUDA codegen of loop kernels: barriers are not supported (threads of a parallel "
                           "task run different numbers of indices)")


_EXPR: dict[type, Callable[[LoopTaskWriter, k.Expr], str]] = {
    k.Const: lambda w, e: const_text(e.value, e.dtype),
    k.Var: lambda w, e: w.var(e),
    k.ScalarRef: lambda w, e: w.param(e.param),
    k.ArrayExtent: lambda w, e: w.field(e.param, "shape", e.axis),
    k.ArrayStride: lambda w, e: w.field(e.param, "stride", e.axis),
    k.Load: lambda w, e: w.element(e.param, e.indices),
    k.LoadLocal: lambda w, e: f"{w.var(e.array)}[{w.expr(e.index)}]",
    k.Unary: lambda w, e: w.apply(e.op, [e.x], e.dtype, dict(e.attrs)),
    k.Binary: lambda w, e: w.apply(e.op, [e.a, e.b], e.dtype),
    k.Ternary: lambda w, e: w.apply(e.op, [e.a, e.b, e.c], e.dtype),
    k.Cast: lambda w, e: w.apply("cast", [e.x], e.dtype),
    k.Philox: lambda w, e: f"bz_philox({', '.join(w.expr(x) for x in (e.seed, e.offset, e.group, e.word))})",
}

_STMT: dict[type, Callable[[LoopTaskWriter, k.Stmt], None]] = {
    k.Let: _let,
    k.Assign: _assign,
    k.Store: _store,
    k.StoreLocal: _store_local,
    k.AtomicRMW: LoopTaskWriter.emit_atomic,
    k.If: LoopTaskWriter.emit_if,
    k.For: LoopTaskWriter.emit_for,
    k.While: LoopTaskWriter.emit_while,
    k.Break: LoopTaskWriter.emit_jump,
    k.Continue: LoopTaskWriter.emit_jump,
    k.Alloc: LoopTaskWriter.emit_alloc,
    k.Sync: _unsupported_sync,
    k.Assert: LoopTaskWriter.emit_assert,
}


def write_task(kernel: k.Kernel, task: k.Task, function: str, layout: ArgLayout, block_size: int,
               restrict: bool) -> str:
    """The task's function; written again with the locals C++ scoping misses declared at the top."""
    hoisted: frozenset[k.Var] = frozenset()
    for _ in range(8):  # each pass only adds names; in practice one more pass settles it
        writer = LoopTaskWriter(kernel, task, function, layout, block_size, restrict, hoisted)
        text = writer.write()
        if not writer.missing:
            return text
        hoisted |= writer.missing
    raise UnsupportedError(f"CUDA codegen: the locals of task {task.name!r} do not settle into C++ scopes")


def function_names(kernel: k.Kernel) -> tuple[str, ...]:
    """Each task's `__global__` name: the task's own, unless C++ cannot take it."""
    names = Names()
    return tuple(names(("task", t.name), t.name if not is_reserved(t.name) else f"bz_task_{n}")
                 for n, t in enumerate(kernel.tasks))


def generate(kernel: k.Kernel, block_size: int = DEFAULT_BLOCK_SIZE, restrict: bool = False) -> LoopCudaSource:
    """CUDA C++ for a loop kernel. `restrict`: no two array parameters share memory (the runtime
    checks the arguments), so arrays the kernel only reads may go through the read-only cache."""
    from braze.codegen import cuda_rules  # noqa: F401  (fills RULES)

    layout = ArgLayout.of(kernel.params)
    if 8 * layout.size > MAX_PARAM_BYTES:
        raise UnsupportedError(f"kernel {kernel.name!r}: {len(kernel.params)} parameters need {8 * layout.size} "
                               f"bytes of kernel arguments; CUDA takes {MAX_PARAM_BYTES}")
    functions = function_names(kernel)
    header = f"// {kernel.name}: {len(kernel.tasks)} task(s), from {kernel.source or 'Kernel IR'}"
    bodies = [write_task(kernel, t, f, layout, block_size, restrict) for t, f in zip(kernel.tasks, functions)]
    return LoopCudaSource("\n\n".join([header, *bodies]) + "\n", functions)

