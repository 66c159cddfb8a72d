"""`@bz.kernel` bodies: Python AST -> Kernel IR.

Each top-level `for` over `range` or `bz.ndrange` becomes a parallel task; runs of other
top-level statements, `for` loops over `bz.serial(...)` among them, become serial tasks. Inside a
task, Python statements map one to one onto Kernel IR statements; `bz.static` values, globals and
closure values are folded at compile time and `@bz.func` helpers are inlined. Every error names the
file and line with the offending source.
"""

from __future__ import annotations

import ast
import builtins
import functools
import itertools
import warnings
from collections.abc import Callable, Sequence

from braze import dtypes as dt
from braze.dtypes import DType
from braze.errors import KernelSyntaxError, KernelTypeError, SerialLoopWarning
from braze.frontend import kernel_lang as lang
from braze.frontend import kernel_types as ty
from braze.frontend import kernel_vectors as vec
from braze.frontend.kernel_exprs import (
    BINARY_OPS,
    OPERATOR_SYMBOLS,
    ExpressionTranslator,
    is_pure_constant,
    unsupported,
)
from braze.frontend.kernel_iteration import IterationLocals
from braze.frontend.kernel_loop_else import without_else
from braze.frontend.kernel_scope import (
    ArrayHandle,
    FunctionScope,
    Local,
    LocalArray,
    LocalTuple,
    ShapeHandle,
    Source,
    TableRow,
    VectorLocal,
    VectorValue,
    assignments,
    host_evaluable,
    reads_no_memory,
)
from braze.frontend.kernel_targets import TargetTranslator
from braze.kir import nodes as k
from braze.lower.values import index_op
from braze.passes.fuse_tasks import injective


class WidenLocal(Exception):  # noqa: N818  (a restart, not an error)
    """A local first set from a Python literal is stored a wider value of its kind: translate again
    with the local declared that wide."""

    def __init__(self, key: tuple, dtype: DType) -> None:
        super().__init__(key, dtype)
        self.key, self.dtype = key, dtype


class KeepLocal(Exception):  # noqa: N818  (a restart, not an error)
    """A serial task assigns a name that a top-level assignment made a launch-time value (`total = 0`
    before `for c in bz.serial(range(n)): total = total + counts[c]`): translate again with that
    assignment a statement of the serial task, so the name is one of its locals."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def translate_kernel(name: str, source: Source, params: dict[str, object], debug: bool,
                     warned: set[str] | None = None, overlapping: bool = False) -> list[k.Task]:
    """The tasks of a kernel. A local first set from a Python literal takes the widest dtype of its
    kind stored into it (`acc = 0.0` then `acc += x[i]` on float64 data accumulates in float64, not
    in the literal's float32), found by translating again each time one widens; likewise a top-level
    name a serial task assigns is made a local of its serial task (KeepLocal). A warning whose message
    is in `warned` is not given again; each one given is added to it. `overlapping`: the call's arrays
    may share memory, so its in-place updates are atomic wherever they have an atomic form."""
    warned = set() if warned is None else warned
    widened: dict[tuple, DType] = {}
    serial_locals: set[str] = set()
    while True:
        translator = Translator(name, source, params, debug, widened, serial_locals, overlapping)
        try:
            tasks = translator.translate()
        except WidenLocal as widen:
            widened[widen.key] = widen.dtype
        except KeepLocal as keep:
            serial_locals.add(keep.name)
        else:
            for message in translator.warnings:
                if message not in warned:
                    warned.add(message)
                    warnings.warn(message, SerialLoopWarning, stacklevel=3)
            return tasks


def _describe_held(value) -> str:
    """What a local holds, or a value would make it hold, for an error naming both."""
    if isinstance(value, LocalTuple):
        return f"a tuple of {len(value.names)} values"
    return "a single value" if isinstance(value, (Local, VectorLocal)) else f"a {type(value).__name__}"


def _computed_from(value) -> set[k.Var]:
    """The locals `value` computes in its own dtype (`w` in `w / 3`): a wider value meeting `w / 3`
    meets `w` too, since in Python `w = 0.1` is a float64 and `w / 3` is one as well. Each shared
    subexpression is visited once (Kernel IR is a DAG)."""
    found: set[k.Var] = set()
    seen: set[int] = set()
    pending = [value] if isinstance(value, k.Expr) else []
    while pending:
        e = pending.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, k.Var):
            found.add(e)
        elif isinstance(e, (k.Unary, k.Binary, k.Ternary)):
            children = (getattr(e, field) for field in ("x", "a", "b", "c") if hasattr(e, field))
            pending += [child for child in children if child.dtype == e.dtype]
    return found


def _offset(e: k.Expr) -> tuple[k.Expr | None, int]:
    """`e` as (base, constant) where it is `base + c` or `base - c` (None: a constant alone)."""
    if isinstance(e, k.Const):
        return None, int(e.value)
    if isinstance(e, k.Binary) and e.op in ("add", "sub") and isinstance(e.b, k.Const):
        return e.a, int(e.b.value) * (1 if e.op == "add" else -1)
    return e, 0


def _unit_count(high: k.Expr, low: k.Expr) -> k.Expr:
    """`len(range(low, high))`, `max(high - low, 0)`, with the constants of `n - 1` and `-1` folded and
    the maximum left out where the count is an array extent: a loop over `range(n - 1, -1, -1)` then
    has the same bounds as one over `range(n)`, and the two may merge (passes/fuse_tasks.py)."""
    (high_base, high_c), (low_base, low_c) = _offset(high), _offset(low)
    if low_base is None or low_base == high_base:
        base = high_base if low_base is None else None
        c = high_c - low_c
        count = k.Const(c, dt.int64) if base is None else index_op("add", base, k.Const(c, dt.int64))
        if base is None or isinstance(base, k.ArrayExtent) and c >= 0:
            return k.Const(max(c, 0), dt.int64) if base is None else count
    else:
        count = index_op("sub", high, low)
    return index_op("maximum", count, k.Const(0, dt.int64))


def disjoint_places(places: set[tuple[k.Expr, ...]], coordinates: Sequence[k.Var]) -> bool:
    """Whether updates at these indices, each injective in the task's index, meet only on one thread:
    two places are apart by distinct constants in some coordinate (`f[i, 0]` and `f[i, 1]`), or share,
    for each task coordinate, an index injective in it (`v[i, 1]` and `v[i, d]`)."""
    def one_thread(p: tuple[k.Expr, ...], q: tuple[k.Expr, ...]) -> bool:
        if any(isinstance(a, k.Const) and isinstance(b, k.Const) and a.value != b.value for a, b in zip(p, q)):
            return True
        return all(any(a == b and injective(a, t) for a, b in zip(p, q)) for t in coordinates)

    return all(one_thread(p, q) for p, q in itertools.combinations(places, 2))


class Translator(ExpressionTranslator, TargetTranslator):
    """Builds the tasks of one kernel from its Python source."""

    def __init__(self, name: str, source: Source, params: dict[str, object], debug: bool,
                 widened: dict[tuple, DType] | None = None, serial_locals: set[str] | None = None,
                 overlapping: bool = False) -> None:
        self.name, self.source, self.debug = name, source, debug
        self.overlapping = overlapping  # the call's arrays may share memory (kernel.py's signature)
        self.widened = widened if widened is not None else {}  # local key -> its dtype (translate_kernel)
        self.literal_locals: dict[k.Var, tuple] = {}  # the variable of a local first set from a literal -> its key
        # A local computed in its own dtype from literal locals (`mid = 0.5 * (lo + hi)` after `lo, hi = 0.0, 1.0`)
        # -> their keys: a wider value meeting `mid` widens them, and so `mid` on the next translation.
        self.literal_sources: dict[k.Var, frozenset[tuple]] = {}
        self.serial_locals = serial_locals if serial_locals is not None else set()  # never launch-time values
        self.alias_names: set[str] = set()  # top-level names bound to launch-time values
        self.kernel_names: dict[str, object] = dict(params)
        self.tasks: list[k.Task] = []
        self.frames: list[FunctionScope] = []
        self.blocks: list[list[k.Stmt]] = []
        self.prologue: list[k.Stmt] = []
        self.used_names: set[str] = set()
        self.depth = 0  # nesting of runtime if/for/while inside the current task
        self.loops: list[str] = []  # "parallel", "serial", "static"
        self.task_coordinates: list[k.Var] = []  # the parallel task's index (one per ndrange axis)
        self.earlier_locals: set[str] = set()
        self.serial: list[ast.stmt] = []
        self.warnings: list[str] = []  # SerialLoopWarning messages, given once the translation succeeds
        self.task_kind = ""  # "range_for" or "serial": the kind of the task being translated
        self.iteration: IterationLocals | None = None  # a parallel task's locals set so far in its iteration
        self.discarded: ast.expr | None = None  # the call of an expression statement: its value goes unread
        # Arrays a parallel task updates in place (`a[j] += v`): those updated atomically somewhere in the
        # task, the places of the updates of an element each thread owns, and the arrays whose every
        # update is atomic.
        self.atomic_updates: set[str] = set()
        self.owned_updates: dict[str, set[tuple[k.Expr, ...]]] = {}
        self.all_updates_atomic: frozenset[str] = frozenset()

    # --- errors -------------------------------------------------------------------------------
    def error(self, node: ast.AST, message: str, kind: type = KernelSyntaxError):
        place, text = self.frames[-1].source.where(node) if self.frames else self.source.where(node)
        raise kind(f"{place}{message}\n    {text}")

    def checked(self, node: ast.AST, thunk: Callable):
        try:
            return thunk()
        except ty.TypeProblem as problem:
            self.error(node, str(problem), KernelTypeError)

    # --- the kernel body --------------------------------------------------------------------------
    def translate(self) -> list[k.Task]:
        self.top_level(self.source.tree.body)
        self.flush_serial()
        return self.tasks

    def top_level(self, stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if _is_docstring(node):
                continue
            if isinstance(node, ast.For) and self.parallel_range(node.iter):
                self.flush_serial()
                self.parallel_task(node)
            elif isinstance(node, ast.For) and self.is_static_call(node.iter):
                for value in self.compile_time(node.iter.args[0], kernel_scope=True):
                    self.bind_target(node.target, value, self.kernel_names)
                    self.top_level(node.body)
            elif isinstance(node, ast.If) and self.try_compile_time(node.test) is not None:
                self.top_level(node.body if self.try_compile_time(node.test)[0] else node.orelse)
            elif isinstance(node, ast.Pass):
                continue
            elif self.try_alias(node):
                continue
            else:
                self.serial.append(node)

    def parallel_range(self, it: ast.expr) -> bool:
        return isinstance(it, ast.Call) and self.resolve_callee(it.func, kernel_scope=True) in _RANGES

    def is_static_call(self, e: ast.expr) -> bool:
        return isinstance(e, ast.Call) and self.resolve_callee(e.func, kernel_scope=True) is lang.static

    def is_serial_call(self, e: ast.expr) -> bool:
        return isinstance(e, ast.Call) and self.resolve_callee(e.func, kernel_scope=True) is lang.serial

    def try_alias(self, node: ast.stmt) -> bool:
        """`n = x.shape[0] - 1` at top level: a name for a launch-time value, shared by all tasks
        (also `rows, cols = x.shape` and `nx, ny = x.shape[0], x.shape[1]`)."""
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            return False
        if _names_read(node.value) & _names_stored(self.serial):
            return False  # `dt = min(dt, 0.1)` after `dt = s[0] * h`: reads a local of the serial task before it
        target = node.targets[0]
        if isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts):
            if isinstance(node.value, ast.Tuple) and len(node.value.elts) == len(target.elts):
                return self.try_alias_each([t.id for t in target.elts], node.value.elts)
            if any(t.id in self.serial_locals for t in target.elts):
                return False
            value = self.in_scratch_task(lambda: self.expr(node.value))
            if not isinstance(value, ShapeHandle):
                return False
            for t, extent in zip(target.elts, self.unpacked(node, value, len(target.elts))):
                self.kernel_names[t.id] = extent
            self.alias_names.update(t.id for t in target.elts)
            return True
        if not isinstance(target, ast.Name):
            return False
        return self.try_alias_each([target.id], [node.value])

    def try_alias_each(self, names: list[str], exprs: list[ast.expr]) -> bool:
        """Names every value, all read before any is bound (as Python does), if each is a launch-time
        value; otherwise binds none, and the assignment is a serial task's."""
        values = [self.alias_value(name, e) for name, e in zip(names, exprs)]
        if any(value is None for value in values):
            return False
        self.kernel_names.update(zip(names, values))
        self.alias_names.update(names)
        return True

    def alias_value(self, name: str, e: ast.expr):
        """The launch-time value `name = e` would name at top level, or None if it is not one."""
        if name in self.kernel_names and isinstance(self.kernel_names[name], (ArrayHandle, k.ScalarRef)):
            return None  # reported as an assignment to a parameter
        if name in self.updated_names or name in self.serial_locals:
            return None  # `s = 0.0` before a serial loop that adds to it: a serial task's local
        value = self.in_scratch_task(lambda: self.expr(e))
        if isinstance(value, VectorValue) and not all(_reads_only_parameters(x) for x in value.items):
            return None  # a vector read from arrays: a local of a serial task, as a scalar would be
        if value is None or not (not isinstance(value, k.Expr) or host_evaluable(value)
                                 or self.parameter_expression_named_once(name, value)):
            return None
        return value

    @functools.cached_property
    def updated_names(self) -> frozenset[str]:
        """The names the kernel updates (`s += x`, or assigns in a `while` loop): never launch-time values."""
        updated = {n.target.id for n in ast.walk(self.source.tree)
                   if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
        for loop in (n for n in ast.walk(self.source.tree) if isinstance(n, ast.While)):
            updated |= {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        return frozenset(updated)

    def parameter_expression_named_once(self, name: str, value: k.Expr) -> bool:
        """`half_dt = 0.5 * dt`: a value of scalar parameters and constants that every task may compute
        itself, under a name the kernel binds nowhere else (one it updates is a serial task's local)."""
        stores = sum(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == name
                     for n in ast.walk(self.source.tree))
        return stores == 1 and _reads_only_parameters(value)

    def in_scratch_task(self, thunk: Callable):
        """Evaluates an expression as if in a task of its own; None if it needed statements."""
        saved = (self.frames, self.blocks, self.prologue, self.used_names)
        self.frames, self.blocks, self.prologue, self.used_names = \
            [FunctionScope(self.source, {}, self.kernel_names)], [[]], [], set()
        try:
            value = thunk()
            return None if self.blocks[0] or self.prologue else value
        finally:
            self.frames, self.blocks, self.prologue, self.used_names = saved

    # --- tasks ------------------------------------------------------------------------------------
    def begin_task(self, kind: str) -> None:
        self.frames = [FunctionScope(self.source, {}, self.kernel_names)]
        self.blocks, self.prologue, self.used_names, self.depth = [[]], [], set(), 0
        self.task_kind = kind
        self.iteration = IterationLocals() if kind == "range_for" else None
        self.atomic_updates, self.owned_updates = set(), {}
        self.fixed_locals: dict[k.Var, k.Expr] = {}  # locals set once, to arithmetic of indices: their values

    def end_task(self) -> tuple[k.Stmt, ...]:
        self.earlier_locals |= set(self.frames[0].names)
        body = tuple(self.prologue + self.blocks[0])
        self.frames, self.blocks = [], []
        return body

    def task_name(self) -> str:
        return f"{self.name}_t{len(self.tasks)}"

    def flush_serial(self) -> None:
        if not self.serial:
            return
        stmts, self.serial = self.serial, []
        self.warn_serial_loops(stmts)
        self.begin_task("serial")
        self.loops = []
        self.statements(stmts)
        self.tasks.append(k.Task(self.task_name(), "serial", self.end_task()))

    def warn_serial_loops(self, stmts: list[ast.stmt]) -> None:
        """Only a top-level `for` is a parallel task: a loop nested under a top-level `if` or `while`
        runs on one thread. Said once per loop, since that is rarely what was meant; a loop over
        `bz.serial(...)`, and what it holds, asks for one thread and is not warned about."""
        for node in stmts:
            if isinstance(node, ast.For):
                continue
            loop = next(self.unmarked_loops(node), None)
            if loop is not None:
                place, _ = self.source.where(loop)
                self.warnings.append(f"{place}kernel {self.name}: this loop is nested under a top-level "
                                     f"{type(node).__name__.lower()} and runs serially on one thread; to run it "
                                     "in parallel, make the loop top-level and test the condition inside it (or "
                                     "use bz.static(...) for a condition known at compile time); to run it in "
                                     "order on one thread, write it as `for ... in bz.serial(range(...))`")

    def unmarked_loops(self, node: ast.AST):
        """The `for` loops under `node` that no `bz.serial(...)` marks, outermost first."""
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.For) and self.is_serial_call(child.iter):
                continue
            if isinstance(child, ast.For):
                yield child
            yield from self.unmarked_loops(child)

    def parallel_task(self, node: ast.For) -> None:
        if node.orelse:
            self.error(node, "unsupported construct: for-else on a parallel loop (its iterations run in parallel "
                             "and cannot break; write the else clause's statements after the loop)")
        warnings = len(self.warnings)
        while True:
            self.begin_task("range_for")
            begin, end, indices = self.parallel_indices(node)
            self.loops = ["parallel"]
            self.statements(node.body)
            body = self.end_task()
            mixed = {name for name, places in self.owned_updates.items()
                     if name in self.atomic_updates or not disjoint_places(places, self.task_coordinates)}
            if not mixed:
                break
            # `f[i] += s` and `f[i + 1] -= s` each reach an element per thread, but thread i - 1's second
            # update meets thread i's first: two plain read-modify-writes of one element lose one.
            # Translated again, with every update of such an array atomic.
            self.all_updates_atomic |= mixed
            del self.warnings[warnings:]
        self.all_updates_atomic = frozenset()
        self.tasks.append(k.Task(self.task_name(), "range_for", body, indices, begin, end))

    def parallel_indices(self, node: ast.For) -> tuple[k.Expr, k.Expr, k.Var]:
        """The task's bounds and loop index; `bz.ndrange` indices are split from one flat index, and
        `bz.grouped`'s index vector holds them."""
        vector = self.grouped_name(node)
        extents, step = self.range_extents(node.iter)
        names = self.loop_names(node, len(extents), vector)
        if step is not None:
            return self.stepped_index(names[0], *extents[0], step)
        if len(extents) == 1:
            var = self.new_var(names[0], dt.int64)
            self.frames[0].names[names[0]] = Local(var, loop_index=True)
            self.task_coordinates = [var]
            self.bind_index_vector(node, vector, names, [var])
            return extents[0][0], extents[0][1], var
        bounds = self.split_flat_index(extents, names)
        self.bind_index_vector(node, vector, names, list(reversed(self.task_coordinates)))
        return bounds

    def split_flat_index(self, extents: list[tuple[k.Expr, k.Expr]], names: list[str]) -> tuple[k.Expr, k.Expr, k.Var]:
        """A task over every cell of `extents`: one flat index, split into each axis's index (`names`)."""
        self.task_coordinates = []
        sizes = [index_op("maximum", index_op("sub", hi, lo), k.Const(0, dt.int64)) for lo, hi in extents]
        flat = self.new_var("_".join(names) + "_flat", dt.int64)
        end = k.Const(1, dt.int64)
        for size in sizes:
            end = index_op("mul", end, size)
        inner = k.Const(1, dt.int64)
        for axis in reversed(range(len(extents))):
            position = flat if axis == len(extents) - 1 else index_op("floordiv", flat, inner)
            if axis > 0:
                position = index_op("remainder", position, sizes[axis])
            var = self.new_var(names[axis], dt.int64)
            self.task_coordinates.append(var)
            self.prologue.insert(0, k.Let(var, index_op("add", extents[axis][0], position)))
            self.frames[0].names[names[axis]] = Local(var, loop_index=True)
            inner = index_op("mul", inner, sizes[axis])
        return k.Const(0, dt.int64), end, flat

    def stepped_index(self, name: str, begin: k.Expr, end: k.Expr, step: k.Expr) -> tuple[k.Expr, k.Expr, k.Var]:
        """`range(begin, end, step)` as a task over [0, count): task index t is `begin + t * step`, and
        count is Python's `len(range(...))`, `max(ceil((end - begin) / step), 0)`, for either sign of step."""
        flat = self.new_var(f"{name}_step", dt.int64)
        var = self.new_var(name, dt.int64)
        self.task_coordinates = [var]
        self.prologue.insert(0, k.Let(var, index_op("add", begin, index_op("mul", flat, step))))
        self.frames[0].names[name] = Local(var, loop_index=True)
        zero = k.Const(0, dt.int64)
        if isinstance(step, k.Const) and step.value in (1, -1):  # range(n - 1, -1, -1): n, as range(n) has
            return zero, _unit_count(*((end, begin) if step.value == 1 else (begin, end))), flat
        count = index_op("sub", zero, index_op("floordiv", index_op("sub", begin, end), step))
        return zero, index_op("maximum", count, zero), flat

    def range_extents(self, it: ast.Call) -> tuple[list[tuple[k.Expr, k.Expr]], k.Expr | None]:
        """[(begin, end)] of a top-level range, ndrange or grouped, and a range's step (None where it has
        none), as host-evaluable int64 expressions."""
        callee = self.resolve_callee(it.func, kernel_scope=True)
        if callee is lang.grouped:
            inner = self.grouped_inner(it)
            if isinstance(inner, ArrayHandle):
                return [(k.Const(0, dt.int64), k.ArrayExtent(inner.param, axis)) for axis in range(inner.ndim)], None
            extents, step = self.range_extents(inner)
            if step is not None:
                self.error(it, "bz.grouped: expected a range without a step, or a bz.ndrange")
            return extents, None
        args = [self.expr(a) for a in it.args]
        step = None
        if callee is range:
            if len(args) == 3:
                step = self.parallel_step(it, args.pop())
            pairs = [(0, args[0])] if len(args) == 1 else [tuple(args)] if len(args) == 2 else None
            if pairs is None:
                self.error(it, "range: expected 1 to 3 arguments")
        else:
            pairs = [(0, a) if not isinstance(a, tuple) else a for a in args]
            for pair in pairs:
                if len(pair) != 2:
                    self.error(it, f"bz.ndrange: expected each dimension as n or (lo, hi), got a tuple of {len(pair)} "
                                   "(a parallel loop with a step is range(lo, hi, step), over one dimension)")
        return [tuple(self.host_index(it, v, "a parallel range bound") for v in pair) for pair in pairs], step

    def parallel_step(self, it: ast.Call, step: object) -> k.Expr:
        """A parallel range's step: a non-zero constant, or computed from scalar parameters and shapes
        (where it is 0 at run time the range is empty, as the generated code divides by 0 as 0)."""
        step = self.host_index(it, step, "a parallel range step")
        if isinstance(step, k.Const) and step.value == 0:
            self.error(it, "range: expected a non-zero step, got 0")
        return step

    def host_index(self, it: ast.Call, value: object, what: str) -> k.Expr:
        value = self.checked(it, lambda: ty.index(value, what))
        if not host_evaluable(value):
            self.error(it, f"unsupported construct: {what} must be computed from scalar parameters, shapes "
                           "and constants")
        return value

    # --- bz.grouped: the index as one integer vector ----------------------------------------------
    def grouped_name(self, node: ast.For) -> str | None:
        """The name of a `for I in bz.grouped(...)` loop's index vector; None for any other loop."""
        it = node.iter
        if not (isinstance(it, ast.Call) and self.resolve_callee(it.func, kernel_scope=not self.frames)
                is lang.grouped):
            return None
        if not isinstance(node.target, ast.Name):
            self.error(node.target, "bz.grouped: the loop takes one name, its index vector (for I in bz.grouped(...)); "
                                    "to name each index, loop over the bz.ndrange itself")
        return node.target.id

    def grouped_inner(self, it: ast.Call) -> ast.Call | ArrayHandle:
        """What `bz.grouped(...)` walks: a range or ndrange call, or an array (its indices)."""
        inner = it.args[0] if len(it.args) == 1 and not it.keywords else None
        if isinstance(inner, ast.Call) and self.resolve_callee(inner.func, kernel_scope=not self.frames) in \
                (range, lang.ndrange):
            return inner
        handle = self.expr(inner) if inner is not None else None
        if isinstance(handle, ArrayHandle):
            return handle
        self.error(it, "bz.grouped: expected one bz.ndrange(...), range(...) or array, as in "
                       "`for I in bz.grouped(bz.ndrange(n, m))` or `for I in bz.grouped(a)`")

    def grouped_ranges(self, it: ast.Call) -> list[tuple[k.Expr, k.Expr, int]]:
        """(begin, end, step) of each axis of a nested (serial) `bz.grouped` loop."""
        inner = self.grouped_inner(it)
        if isinstance(inner, ArrayHandle):
            return [(k.Const(0, dt.int64), k.ArrayExtent(inner.param, axis), 1) for axis in range(inner.ndim)]
        if self.resolve_callee(inner.func) is range:
            return [self.range_args(inner)]
        return [self.range_args(a, ndrange=True) for a in inner.args]

    def loop_names(self, node: ast.For, count: int, vector: str | None) -> list[str]:
        """The names of a loop's indices: its targets, or a grouped loop's components (`I[0]`, ..., names
        no Python code can take)."""
        return [f"{vector}[{axis}]" for axis in range(count)] if vector else self.target_names(node.target, count)

    def bind_index_vector(self, node: ast.For, vector: str | None, names: list[str], variables: list[k.Var]) -> None:
        """`vector` names the integer vector of `variables`, the indices a grouped loop's `names` held."""
        if vector is None:
            return
        if len(variables) > 4:
            self.error(node, f"bz.grouped: an index vector has at most 4 components, got {len(variables)}",
                       KernelTypeError)
        for name in names:
            self.frames[-1].names.pop(name, None)
        vtype = vec.type_of_shape((len(variables),), dt.int64)
        self.frames[-1].names[vector] = VectorValue(vtype, tuple(variables))

    def target_names(self, target: ast.expr, count: int) -> list[str]:
        elements = target.elts if isinstance(target, ast.Tuple) else [target]
        if len(elements) != count or not all(isinstance(e, ast.Name) for e in elements):
            self.error(target, f"expected {count} loop index name(s)")
        return [e.id for e in elements]

    # --- names ----------------------------------------------------------------------------------
    def new_var(self, name: str, dtype: DType) -> k.Var:
        unique, n = name, 1
        while unique in self.used_names:
            n += 1
            unique = f"{name}_{n}"
        self.used_names.add(unique)
        return k.Var(unique, dtype)

    def lookup(self, node: ast.Name, kernel_scope: bool = False):
        frame = self.frames[-1] if self.frames and not kernel_scope else None
        for names in ((frame.names, frame.outer) if frame else (self.kernel_names,)):
            if node.id in names:
                if frame is not None and names is frame.names:
                    self.check_iteration_read(node, names[node.id])
                return names[node.id]
        source = frame.source if frame else self.source
        if node.id in source.names:
            return source.names[node.id]
        if hasattr(builtins, node.id):
            return getattr(builtins, node.id)
        if node.id in self.earlier_locals:
            self.error(node, f"'{node.id}' is a local of an earlier task; tasks share only arrays and parameters "
                             "(assign it in this task, or keep it in an array element; a top-level `for` is a "
                             "parallel task: for a loop that carries a running value on one thread, as a prefix "
                             "sum does, write it as `for ... in bz.serial(range(...))` after the local's "
                             "assignment)")
        self.error(node, f"unknown name '{node.id}'")

    def check_iteration_read(self, node: ast.Name, value) -> None:
        """Refuses a read of a parallel task's local that could see what an earlier iteration left
        (braze/frontend/kernel_iteration.py): each iteration has its own locals."""
        if self.iteration is None or len(self.frames) != 1 or not isinstance(value, (Local, VectorLocal)):
            return
        if isinstance(value, Local) and value.loop_index or self.iteration.may_read(node.id):
            return
        self.error(node, f"'{node.id}' may be read before this iteration of a parallel loop sets it, where Python "
                         "would read what the previous iteration left; each iteration of a top-level `for` runs "
                         "in parallel with locals of its own. Set it on every path before reading it, or, for a "
                         "loop that carries a value from one iteration to the next, write "
                         "`for ... in bz.serial(range(...))` to run it in order on one thread")

    def resolve_callee(self, e: ast.expr, kernel_scope: bool = False):
        try:
            return self.compile_time(e, kernel_scope)
        except KernelSyntaxError:
            return None

    def compile_time(self, e: ast.expr, kernel_scope: bool = False):
        """A Name or attribute chain (`bz.math.sin`), or a bz.static argument, evaluated at compile time."""
        if isinstance(e, ast.Name):
            return self.lookup(e, kernel_scope)
        if isinstance(e, ast.Attribute):
            base = self.compile_time(e.value, kernel_scope)
            if isinstance(base, (ArrayHandle, ShapeHandle, Local, k.Expr)):
                self.error(e, "not a compile-time value")
            if not hasattr(base, e.attr):
                self.error(e, f"unknown attribute '{e.attr}'")
            return getattr(base, e.attr)
        value = self.expr(e) if self.frames else self.in_scratch_task(lambda: self.expr(e))
        if isinstance(value, (k.Expr, Local, ArrayHandle, ShapeHandle)):
            self.error(e, "bz.static: expected a value known at compile time")
        return value

    def try_compile_time(self, e: ast.expr) -> tuple | None:
        """(value,) when `e` is known at compile time (a bz.static call, a global), else None."""
        if isinstance(e, ast.Call) and self.resolve_callee(e.func, kernel_scope=not self.frames) is lang.static:
            return (self.compile_time(e.args[0], kernel_scope=not self.frames),)
        try:
            value = self.in_scratch_task(lambda: self.expr(e)) if not self.frames else None
        except KernelSyntaxError:
            return None
        return (value,) if value is not None and not isinstance(value, (k.Expr, ArrayHandle, ShapeHandle)) else None

    # --- statements -------------------------------------------------------------------------------
    def emit(self, stmt: k.Stmt) -> None:
        self.blocks[-1].append(stmt)

    def nested(self, thunk: Callable) -> tuple[k.Stmt, ...]:
        """The statements `thunk` emits, as a block nested in the current one (an if, a loop body)."""
        self.blocks.append([])
        self.depth += 1
        try:
            thunk()
        finally:
            self.depth -= 1
        return tuple(self.blocks.pop())

    def statements(self, stmts: list[ast.stmt]) -> None:
        for node in stmts:
            handler = getattr(self, f"stmt_{type(node).__name__}", None)
            if handler is None:
                self.error(node, unsupported(type(node).__name__, "statement"))
            handler(node)

    def stmt_Pass(self, node: ast.Pass) -> None:
        pass

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return
        self.discarded = node.value
        try:
            self.expr(node.value)
        finally:
            self.discarded = None

    def stmt_Assign(self, node: ast.Assign) -> None:
        target = node.targets[0]
        if len(node.targets) == 1 and isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            if len(target.elts) != len(node.value.elts):
                self.error(node, "tuple assignment: the two sides have different lengths")
            values = [self.held(self.expr(v)) for v in node.value.elts]  # `x[i], x[j] = x[j], x[i]` swaps
            for t, v in zip(target.elts, values):
                self.assign_parts(t, v, node)
            return
        value = self.expr(node.value)
        if len(node.targets) > 1:  # `a[i] = b[i] = v`: v once, stored into each target from the left, as in Python
            value = self.held(value)
        for target in node.targets:
            self.assign_parts(target, value, node)

    def assign_parts(self, target: ast.expr, value, node: ast.Assign) -> None:
        """`target = value`, a tuple target taking the value apart, nested ones too (`c, (a, b) = f(x)`
        of a helper returning `c, (a, b)`)."""
        if isinstance(target, ast.Tuple):
            for t, v in zip(target.elts, self.unpacked(node, value, len(target.elts))):
                self.assign_parts(t, v, node)
            return
        self.assign(target, value, node)

    def unpacked(self, node: ast.Assign, value, count: int) -> list:
        """The parts of `value` for a tuple target: `h, w = a.shape` gives the extents, `x, y = v` the
        components (a matrix's rows)."""
        if isinstance(value, tuple):  # the values a @bz.func returned
            if len(value) != count:
                self.error(node, f"{len(value)} values unpacked into {count} name(s)", KernelTypeError)
            return list(value)
        if isinstance(value, VectorValue):
            if value.type.shape[0] != count:
                self.error(node, f"a {value.type_name} has {value.type.shape[0]} parts, unpacked into {count} "
                                 "name(s)", KernelTypeError)
            return [self.component(node, value, n) for n in range(count)]
        if not isinstance(value, ShapeHandle):
            self.error(node, "unsupported construct: unpacking a value that is not a tuple or an array's shape")
        if value.ndim != count:
            self.error(node, f"'{value.param.name}.shape' has {value.ndim} extent(s), unpacked into {count} "
                             "name(s)", KernelTypeError)
        return [k.ArrayExtent(value.param, axis) for axis in range(count)]

    def held(self, value):
        """`value` read now, into temporaries (each component of a vector, each item of a tuple): a store
        before its use leaves it alone."""
        if isinstance(value, VectorValue):
            return VectorValue(value.type, tuple(self.temporary(item) for item in value.items))
        if isinstance(value, tuple):
            return tuple(self.held(item) for item in value)
        return self.temporary(value)

    def temporary(self, value):
        if not isinstance(value, k.Expr) or isinstance(value, k.Const):
            return value
        var = self.declare("tmp", value.dtype)
        self.emit(k.Assign(var, value))
        return var

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        op = BINARY_OPS.get(type(node.op))
        if op is None:
            self.error(node, f"unsupported operator {type(node.op).__name__}")
        if not isinstance(node.target, ast.Name) and not self.plain_array_target(node.target):
            self.aug_assign_target(node, op)  # a vector, or a component of one
            return
        if isinstance(node.target, ast.Subscript) and self.in_parallel_task():
            handle, indices = self.subscript(node.target)
            if self.updated_atomically(handle.param, indices, op):
                self.atomic_update(node, op, handle.param, indices)
                return
        current = self.expr(node.target)
        value = self.binary(node, op, current, self.expr(node.value))
        self.assign(node.target, value, node)

    def in_parallel_task(self) -> bool:
        """Whether the statement runs on a parallel task's threads: in the loop's body, or in a
        @bz.func helper it calls (whose loops start afresh, for its break and continue)."""
        return self.task_kind == "range_for"

    def owns(self, indices: tuple[k.Expr, ...]) -> bool:
        """Whether the element at `indices` is provably the current thread's alone: each coordinate of
        the task's index reaches it through an index injective in that coordinate."""
        return all(any(injective(index, var) for index in indices) for var in self.task_coordinates)

    def updated_atomically(self, param: k.ArrayParam, indices: tuple[k.Expr, ...], op: str) -> bool:
        """Whether a parallel task's `param[indices] op= v` is atomic: where the element is not provably
        the thread's own, or where another update in the task is atomic on the same array. Where the
        call's arrays may share memory (`a[i, 1]` of a sliding window is `a[i + 1, 0]`; `a[i]` and
        `b[i + 1]` of one array passed twice are one element), every update with an atomic form is."""
        shared_memory = self.overlapping and op in ty.ATOMIC_AUGMENTED and param.dtype.name in ty.ATOMIC_DTYPES
        indices = tuple(self.known_value(index) for index in indices)
        atomic = param.name in self.all_updates_atomic or not self.owns(indices) or shared_memory
        if atomic:
            self.atomic_updates.add(param.name)
        else:
            self.owned_updates.setdefault(param.name, set()).add(indices)
        return atomic

    def known_value(self, e: k.Expr) -> k.Expr:
        """`e` with each local that is set once, to arithmetic of indices, read as that value: `r = i`, then
        `a[r] *= 2` updates the thread's own element, as `a[i] *= 2` does."""
        for var, value in self.fixed_locals.items():
            e = k.substitute(e, var, value)
        return e

    def atomic_update(self, node: ast.AugAssign, op: str, param: k.ArrayParam, indices: tuple[k.Expr, ...]) -> None:
        """`a[j] += v` on an element other threads may update too (a sum, a histogram): atomic, as in
        Taichi and Warp, so no update is lost."""
        target = f"'{param.name}[...]'"
        symbol = OPERATOR_SYMBOLS[op]
        if op not in ty.ATOMIC_AUGMENTED:
            apart = " (the call's arrays share memory)" if self.overlapping else ""
            self.error(node, f"{target} {symbol}= in a parallel loop: the element is not provably this "
                             f"thread's own{apart} and there is no atomic form of this operator; compute the "
                             "value per thread, or move the update into a serial loop")
        if param.dtype.name not in ty.ATOMIC_DTYPES:
            self.error(node, f"{target} {symbol}= in a parallel loop needs an atomic update: expected "
                             f"an array of {', '.join(ty.ATOMIC_DTYPES)}, got {param.dtype.name}", KernelTypeError)
        value = self.stored(node, self.expr(node.value), param.dtype, target)
        self.emit(k.AtomicRMW(op, param, indices, value, None))

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            self.error(node, "unsupported construct: a declaration without a value")
        value = self.expr(node.value)
        annotation = self.compile_time(node.annotation)
        if isinstance(annotation, vec.VectorType):
            if not isinstance(value, VectorValue) or value.type.shape != annotation.shape:
                self.error(node, f"the annotation is {annotation!r}, the value is {vec.describe(value)}",
                           KernelTypeError)
            self.assign(node.target, self.checked(node, lambda: vec.construct(annotation, [value])), node)
            return
        self.assign(node.target, self.checked(node, lambda: ty.convert(value, dt.as_dtype(annotation))), node)

    def assign(self, target: ast.expr, value, node: ast.AST) -> None:
        value = vec.constant_vector(value) or value  # `p = UPPER` of a global vector: a vector local
        if isinstance(target, (ast.Subscript, ast.Attribute)) and (isinstance(value, VectorValue) or
                                                                   not self.plain_array_target(target)):
            self.assign_target(target, value, node)  # a vector, or a component of one
            return
        if isinstance(target, ast.Subscript):
            handle, indices = self.subscript(target)
            stored = self.stored(node, value, handle.param.dtype, f"'{handle.param.name}'")
            self.emit(k.Store(handle.param, indices, stored))
            return
        if not isinstance(target, ast.Name):
            self.error(node, f"unsupported construct: assignment to {type(target).__name__}")
        self.assign_name(target.id, value, node)

    def assign_name(self, name: str, value, node: ast.AST) -> None:
        frame = self.frames[-1]
        bound = frame.names.get(name, frame.outer.get(name))
        if isinstance(bound, k.ScalarRef):
            self.error(node, f"assignment to scalar parameter '{name}'")
        if isinstance(bound, ArrayHandle):
            self.error(node, f"assignment to array parameter '{name}'; write its elements with {name}[...] = ...")
        if isinstance(bound, Local) and bound.loop_index:
            self.error(node, f"assignment to loop index '{name}'")
        if name not in frame.names and name in frame.outer:
            if self.task_kind == "serial" and len(self.frames) == 1 and name in self.alias_names:
                raise KeepLocal(name)
            self.error(node, f"assignment to '{name}', a top-level value every task reads; tasks share only arrays")
        if self.iteration is not None and len(self.frames) == 1:
            self.iteration.assigned(name)
        if isinstance(value, (ArrayHandle, ShapeHandle, LocalArray)):
            frame.names[name] = value  # another name for a parameter (or a local array)
            return
        if isinstance(value, VectorValue) or isinstance(frame.names.get(name), VectorLocal):
            self.assign_vector_name(name, value, node)
            return
        if isinstance(value, tuple) or isinstance(frame.names.get(name), LocalTuple):
            self.assign_tuple_name(name, value, node)
            return
        if isinstance(value, TableRow):
            self.error(node, "unsupported construct: a local holding a row of a constant table; index the table "
                             "where the entry is used (t[q][0] or t[q, 0])")
        if not ty.is_value(value):
            self.error(node, f"unsupported construct: a local holding {type(value).__name__}")
        if name in frame.names and isinstance(frame.names[name], Local):
            local = frame.names[name]
            self._widen_if_needed(local, name, value)
            var = local.var
            self.widen_literal_locals((value,), var.dtype)  # `w = 0.5` into a float64 local is Python's 0.5
            self._note_literal_sources(var, value)
            self.emit(k.Assign(var, self.checked(node, lambda: ty.assignable(value, var.dtype, f"'{name}'",
                                                                              local=name))))
            return
        from_literal = not isinstance(value, k.Expr)
        dtype = ty.type_of(value)[0]
        if from_literal:
            dtype = self.widened.get(self._local_key(name), dtype)
        if self.depth == 0:
            var = self.new_var(name, dtype)
            self.emit(k.Let(var, ty.as_expr(value, dtype)))
            if reads_no_memory(ty.as_expr(value, dtype)) and assignments(frame.source.tree)[name] == 1:
                self.fixed_locals[var] = ty.as_expr(value, dtype)
        else:
            var = self.declare(name, dtype)
            self.emit(k.Assign(var, ty.as_expr(value, dtype)))
        frame.names[name] = Local(var, from_literal=from_literal)
        if from_literal:
            self.literal_locals[var] = self._local_key(name)
        else:
            self._note_literal_sources(var, value)

    def _note_literal_sources(self, var: k.Var, value) -> None:
        """Records the literal locals `value` computes from in `var`'s dtype as `var`'s sources: in Python
        `mid = 0.5 * (lo + hi)` of float literals is a float64, so a float64 value meeting `mid` must widen
        `lo` and `hi` (it rounded a bisection's every midpoint to float32 where it met a float64 array)."""
        if isinstance(value, k.Expr) and value.dtype == var.dtype:
            keys = self._literal_keys(_computed_from(value))
            if keys:
                self.literal_sources[var] = self.literal_sources.get(var, frozenset()) | keys

    def _literal_keys(self, variables) -> frozenset[tuple]:
        keys = set()
        for v in variables:
            if v in self.literal_locals:
                keys.add(self.literal_locals[v])
            keys |= self.literal_sources.get(v, frozenset())
        return frozenset(keys)

    def assign_tuple_name(self, name: str, value, node: ast.AST) -> None:
        """`w = (a, b, c)` or `[a, b, c]`: each item a hidden local `w[0]`, ... (no Python name can take it)."""
        bound = self.frames[-1].names.get(name)
        items = LocalTuple(tuple(f"{name}[{i}]" for i in range(len(value)))) if isinstance(value, tuple) else None
        if bound is not None and bound != items:
            self.error(node, f"'{name}' holds {_describe_held(bound)}; it cannot take {_describe_held(items or value)}",
                       KernelTypeError)
        for item, part in zip(items.names, value):
            self.assign_name(item, part, node)
        self.frames[-1].names[name] = items

    def widen_literal_locals(self, operands, *targets: DType) -> None:
        """Restarts the translation (WidenLocal) when a local set from a literal meets a wider typed value of
        its kind in an operation (`w = 0.1`, then `w * x[i]` of a float64 x) or is stored into a wider array
        (`targets`): in Python the local is that literal, which either would take at the wider type, not
        rounded to the local's."""
        typed = [*targets, *(v.dtype for v in operands if isinstance(v, k.Expr) and ty.type_of(v)[1] == 0)]
        for v in (var for operand in operands for var in _computed_from(operand)):
            wider = max((d for d in typed if d.kind == v.dtype.kind and d.itemsize > v.dtype.itemsize),
                        key=lambda d: d.itemsize, default=None)
            keys = [key for key in self._literal_keys((v,)) if wider is not None and
                    (key not in self.widened or self.widened[key].itemsize < wider.itemsize)]  # never the same twice
            if keys:
                raise WidenLocal(min(keys), wider)

    def stored(self, node: ast.AST, value, dtype: DType, what: str) -> k.Expr:
        """`value` converted for storing into an array element of `dtype`."""
        self.widen_literal_locals((value,), dtype)
        return self.checked(node, lambda: ty.assignable(value, dtype, what))

    def _local_key(self, name: str) -> tuple:
        source = self.frames[-1].source
        return source.file, source.first_line, name

    def _widen_if_needed(self, local: Local, name: str, value) -> None:
        """Restarts the translation (WidenLocal) when a local set from a literal is stored a wider
        value of its kind: storing it would round it to the literal's type."""
        dtype = ty.type_of(value)[0]
        if local.from_literal and dtype.kind == local.var.dtype.kind and dtype.itemsize > local.var.dtype.itemsize:
            raise WidenLocal(self._local_key(name), dtype)

    def declare(self, name: str, dtype: DType) -> k.Var:
        """A local declared at the top of the task (its first assignment is nested, its use may not be)."""
        var = self.new_var(name, dtype)
        self.prologue.append(k.Let(var, ty.as_expr(False if dtype.is_bool else 0, dtype)))
        return var

    def stmt_If(self, node: ast.If) -> None:
        static = self.static_condition(node.test)
        if static is not None:
            self.statements(node.body if static else node.orelse)
            return
        cond = self.condition(node.test)
        blocks: list[tuple[k.Stmt, ...]] = []
        translators = [(body, lambda body=body: blocks.append(self.nested(lambda: self.statements(body))))
                       for body in (node.body, node.orelse)]
        if self.iteration is None:
            for _, translate in translators:
                translate()
        else:
            self.iteration.branches(translators)
        self.emit(k.If(cond, *blocks))

    def static_condition(self, test: ast.expr) -> bool | None:
        if isinstance(test, ast.Call) and self.resolve_callee(test.func) is lang.static:
            return bool(self.compile_time(test.args[0]))
        value = self.expr(test) if is_pure_constant(test) else None
        # A name may stand for a vector or an array: a value of the kernel, never a constant (and with no
        # truth: ty.truth says so), though Python would take the object for true.
        run_time = (k.Expr, VectorValue, TableRow, ArrayHandle, LocalArray, ShapeHandle)
        return None if value is None or isinstance(value, run_time) else bool(value)

    def condition(self, test: ast.expr) -> k.Expr:
        value = self.expr(test)
        return ty.as_expr(self.checked(test, lambda: ty.truth(value)), dt.bool_)

    def stmt_While(self, node: ast.While) -> None:
        if node.orelse:
            self.statements(without_else(node))
            return
        cond_box: list[k.Expr] = []
        setup = self.nested(lambda: cond_box.append(self.condition(node.test)))
        self.loops.append("serial")
        body = self.serial_body(node)
        self.loops.pop()
        if setup:  # the condition needed statements (bounds checks, short-circuits): test at the top
            exit_check = k.If(ty.unary("logical_not", cond_box[0]), (k.Break(),))
            self.emit(k.While(k.TRUE, setup + (exit_check,) + body))
        else:
            self.emit(k.While(cond_box[0], body))

    def stmt_For(self, node: ast.For) -> None:
        if node.orelse:
            self.statements(without_else(node))
            return
        if not isinstance(node.iter, ast.Call):
            self.error(node, "unsupported loop: iterate over range(...), bz.ndrange(...), bz.grouped(...) or "
                             "bz.static(...)")
        callee = self.resolve_callee(node.iter.func)
        if callee is lang.serial:
            node = self.serial_loop(node)
            callee = self.resolve_callee(node.iter.func)
        if callee is lang.static:
            self.static_for(node)
        elif callee is range:
            self.serial_for(node, [self.range_args(node.iter)])
        elif callee is lang.ndrange:
            self.serial_for(node, [self.range_args(a, ndrange=True) for a in node.iter.args])
        elif callee is lang.grouped:
            self.serial_for(node, self.grouped_ranges(node.iter), self.grouped_name(node))
        else:
            self.error(node, "unsupported loop: iterate over range(...), bz.ndrange(...), bz.grouped(...) or "
                             "bz.static(...)")

    def range_args(self, e: ast.expr, ndrange: bool = False) -> tuple[k.Expr, k.Expr, int]:
        if ndrange:
            parts = e.elts if isinstance(e, ast.Tuple) else [e]
        else:
            parts = e.args
        values = [self.expr(p) for p in parts]
        step = 1
        if len(values) == 3:
            step = values.pop()
            if not isinstance(step, int) or step == 0:
                self.error(e, "range: the step must be a non-zero integer constant")
        if len(values) not in (1, 2):
            self.error(e, "range: expected 1 to 3 arguments")
        lo, hi = (0, values[0]) if len(values) == 1 else values
        lo, hi = (self.checked(e, lambda v=v: ty.index(v, "a range bound")) for v in (lo, hi))
        return lo, hi, step

    def serial_for(self, node: ast.For, ranges: list[tuple[k.Expr, k.Expr, int]], vector: str | None = None) -> None:
        """A serial loop over `ranges` (one per axis); `vector` names a grouped loop's index vector."""
        names = self.loop_names(node, len(ranges), vector)
        if len(ranges) > 1 and any(isinstance(n, ast.Break) for n in ast.walk(node)):
            self.error(node, "unsupported construct: break in a multi-dimensional bz.ndrange loop")
        names_after = [self.value_after_loop(node, n) for n in names]
        variables = [self.new_var(n, dt.int64) for n in names]
        for name, var in zip(names, variables):
            self.frames[-1].names[name] = Local(var, loop_index=True)
        self.bind_index_vector(node, vector, names, variables)
        self.loops.append("serial")
        body = self.serial_body(node, after=names)
        self.loops.pop()
        # Python leaves the name on the last value the loop took (or as it was, when the loop never
        # ran): each iteration copies its index there, a copy compilers sink out of the loop.
        body = tuple(k.Assign(after, var) for after, var in zip(names_after, variables)) + body
        for var, (lo, hi, step) in reversed(list(zip(variables, ranges))):
            body = (k.For(var, lo, hi, body, step),)
        self.emit(body[0])
        for name, after in zip(names, names_after):
            self.frames[-1].names[name] = Local(after)
        self.bind_index_vector(node, vector, names, names_after)

    def serial_loop(self, node: ast.For) -> ast.For:
        """`for c in bz.serial(range(n))`: the loop over the range itself, which anywhere but at the top
        level runs in order already (the top level makes it a serial task: braze/frontend/kernel_ast.py's
        `top_level`)."""
        it = node.iter
        inner = it.args[0] if len(it.args) == 1 and not it.keywords else None
        if not (isinstance(inner, ast.Call) and self.resolve_callee(inner.func) in _RANGES):
            self.error(node, "bz.serial: expected one range(...), bz.ndrange(...) or bz.grouped(...), as in "
                             "`for i in bz.serial(range(n))`")
        return ast.copy_location(ast.For(node.target, inner, node.body, node.orelse), node)

    def serial_body(self, node: ast.For | ast.While, after: list[str] = ()) -> tuple[k.Stmt, ...]:
        """The statements of a serial loop's body; in a parallel task, what the iteration has set is
        followed through it (IterationLocals.loop)."""
        if self.iteration is None:
            return self.nested(lambda: self.statements(node.body))
        body: list[tuple[k.Stmt, ...]] = []
        self.iteration.loop(node, lambda: body.append(self.nested(lambda: self.statements(node.body))), after)
        return body[0]

    def value_after_loop(self, node: ast.For, name: str) -> k.Var:
        """The variable `name` holds after a serial loop over it: the int64 local it already is, or a
        new one. Reusing an enclosing loop's index is refused: inside the inner loop the outer
        index would be lost, which braze cannot follow."""
        bound = self.frames[-1].names.get(name)
        if isinstance(bound, Local) and bound.loop_index:
            self.error(node, f"loop variable '{name}' reuses the index of an enclosing loop; give the inner "
                             "loop another name")
        if isinstance(bound, Local) and bound.var.dtype == dt.int64:
            return bound.var
        return self.declare(name, dt.int64)

    def static_for(self, node: ast.For) -> None:
        self.loops.append("static")
        for value in self.compile_time(node.iter.args[0]):
            self.bind_target(node.target, value, self.frames[-1].names)
            self.statements(node.body)
        self.loops.pop()

    def bind_target(self, target: ast.expr, value, names: dict) -> None:
        if isinstance(target, ast.Name):
            names[target.id] = value
        elif isinstance(target, ast.Tuple) and len(target.elts) == len(value):
            for t, v in zip(target.elts, value):
                self.bind_target(t, v, names)
        else:
            self.error(target, "bz.static loop: cannot unpack the value into the loop target")

    def stmt_Break(self, node: ast.Break) -> None:
        self.jump(node, k.Break(), "break")

    def stmt_Continue(self, node: ast.Continue) -> None:
        self.jump(node, k.Continue(), "continue")

    def jump(self, node: ast.AST, stmt: k.Stmt, word: str) -> None:
        innermost = self.loops[-1] if self.loops else None
        if innermost == "static":
            self.error(node, f"unsupported construct: {word} in a bz.static loop")
        if innermost is None or innermost == "parallel" and word == "break":
            self.error(node, f"unsupported construct: {word} outside a serial loop")
        self.emit(stmt)

    def stmt_Return(self, node: ast.Return) -> None:
        if len(self.frames) > 1:  # in a @bz.func: a return its inlining did not fold into a branch
            self.error(node, "unsupported construct: return inside a bz.static loop, a multi-dimensional bz.ndrange "
                             "loop or a loop's else clause of a @bz.func (no break leaves the first two); set a local "
                             "there and return it after the loop")
        if node.value is None and self.loops[:1] == ["parallel"] and all(w == "static" for w in self.loops[1:]):
            # A Warp or CUDA thread's early exit (`if i >= n: return`) ends its iteration of the parallel loop.
            self.emit(k.Continue())
            return
        self.error(node, "unsupported construct: return in a kernel (a kernel returns nothing; a bare `return` ends "
                         "an iteration of a parallel loop, outside the serial loops nested in it; there, set a flag "
                         "and break)")

    def stmt_Assert(self, node: ast.Assert) -> None:
        if not self.debug:
            return
        place, text = self.frames[-1].source.where(node)
        self.emit(k.Assert(self.condition(node.test), f"{place}assertion failed: {text}"))


_RANGES = (range, lang.ndrange, lang.grouped)  # what a loop a task or a serial loop runs may walk


def _reads_only_parameters(e: k.Expr) -> bool:
    """Whether an expression reads nothing but constants and scalar parameters (any task may compute it)."""
    if isinstance(e, (k.Load, k.LoadLocal, k.Var)):
        return False
    return all(_reads_only_parameters(getattr(e, f)) for f in getattr(e, "__dataclass_fields__", {})
               if isinstance(getattr(e, f), k.Expr))


def _names_read(e: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_stored(stmts: list[ast.stmt]) -> set[str]:
    return {n.id for stmt in stmts for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
