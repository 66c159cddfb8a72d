"""The launches of a prepared call made by one native function, compiled with llvmlite once per
process:

    int32 braze_launch_all(const ContextCheck *context, const LaunchTables *tables, int32 count, CUstream stream)

makes the call's CUDA context current unless it is (`emit_context_check`: asked on every call, not
remembered, since user code such as `torch.cuda.set_device` changes it), then calls each entry of
the stream's table through `cuLaunchKernel`, in order, and returns 0, or `(n << 16) | code` when
launch n failed with CUresult `code`. One ctypes call from Python then runs every kernel of a
fusion: a dozen launches cost one crossing into native code instead of a dozen. A prepared call only
fills a table: nothing is compiled per fusion or per shape.

Most calls have one table for every stream. A call whose kernels take a grid reduction's
workspace has a table per stream instead (the same launches, their parameters pointing into that
stream's workspace: runtime/cuda_resources.py), up to STREAM_TABLES of them, looked up by the
stream; for a stream without one the function launches nothing and returns NEW_STREAM, and the
caller adds the stream's table and calls again.

A prepared call with pointers to patch also gets `braze_launch_patched`, a CPython builtin
(native/host_jit.py) over the same loop: `launch(stream, value, ...)` stores each value into the
argument block at the call's slots, then launches. One call from Python then patches and
launches, where patching from Python costs a ctypes store per pointer and the ctypes call itself
converts each argument (together about a third of the launch).

Any failure to build it leaves the caller launching from Python (`native_launches` answers None
and the host JIT warns once); `BRAZE_DISABLE=host_jit` asks for that directly, `BRAZE_DUMP=host_jit`
prints the LLVM IR once and each table as it is made.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Sequence

from llvmlite import ir

from braze import config
from braze.compile.cuda_driver import DriverCalls
from braze.native import host_jit

I32, I64, I8P = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
# The signature of cuLaunchKernel: function, grid x/y/z, block x/y/z, shared bytes, stream,
# kernel parameters, extra.
_CU_LAUNCH = ir.FunctionType(I32, [I8P, *[I32] * 7, I8P, I8P, I8P])
# PYFUNCTYPE keeps the GIL: a launch takes microseconds, less than releasing and taking it back.
LAUNCH_SIGNATURE = ctypes.PYFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                                     ctypes.c_void_p)
LaunchSpec = tuple[int, int, int, int, int]  # (function handle, grid, block, shared bytes, params address)
NAME = "braze_launch_all"
PATCHED_NAME = "braze_launch_patched"
STREAM_TABLES = 16  # streams with a table of their own a call keeps (beyond: the oldest table goes)
NEW_STREAM = -2  # the answer of a launch on a stream that has no table yet: nothing was launched
_NO_STREAM = 2**64 - 1  # a stream slot being rewritten (no CUstream has this handle)


class ContextCheck(ctypes.Structure):
    """The context a table's kernels belong to and how to make it current; the IR's `%context`."""

    _fields_ = [("get", ctypes.c_void_p), ("set", ctypes.c_void_p), ("context", ctypes.c_void_p)]


def context_check_type() -> ir.LiteralStructType:
    getter = ir.FunctionType(I32, [I8P.as_pointer()]).as_pointer()
    setter = ir.FunctionType(I32, [I8P]).as_pointer()
    return ir.LiteralStructType([getter, setter, I8P])


def emit_context_check(b: ir.IRBuilder, check: ir.Value, finish: Callable[[ir.IRBuilder, ir.Value], None]
                       ) -> Callable[[ir.IRBuilder, ir.Value], None]:
    """Makes `check`'s context current unless it is (one cuCtxGetCurrent, a thread-local read in
    the driver); `finish(builder, code)` where setting it fails, as launch 0 failing would.
    Returns `finish` preceded by making the context current before it current again (where there
    was one), as torch's device guard does: user code that set another device keeps it."""
    field = lambda i: b.load(b.gep(check, [I32(0), I32(i)], inbounds=True))  # noqa: E731
    get, set_, context = field(0), field(1), field(2)
    null = ir.Constant(I8P, None)
    current, restore = b.alloca(I8P, name="current"), b.alloca(I8P, name="restore")
    b.store(null, current)
    b.store(null, restore)
    b.call(get, [current])  # on failure `current` stays NULL and the set below reports the error
    previous = b.load(current, name="previous")
    with b.if_then(b.icmp_unsigned("!=", previous, context), likely=False):
        code = b.call(set_, [context], name="set_code")
        with b.if_then(b.icmp_unsigned("!=", code, I32(0)), likely=False):
            finish(b, code)
        b.store(previous, restore)

    def restore_then_finish(b: ir.IRBuilder, result: ir.Value) -> None:
        before = b.load(restore, name="before")
        with b.if_then(b.icmp_unsigned("!=", before, null), likely=False):
            b.call(field(1), [before])  # a failure here leaves the kernels' context current: harmless
        finish(b, result)

    return restore_then_finish


class LaunchEntry(ctypes.Structure):
    """One launch of a table; the same layout as the IR's `%entry`."""

    _fields_ = [("launch", ctypes.c_void_p), ("function", ctypes.c_void_p), ("params", ctypes.c_void_p),
                ("grid", ctypes.c_uint32), ("block", ctypes.c_uint32), ("shared", ctypes.c_uint32),
                ("unused", ctypes.c_uint32)]


class LaunchTables(ctypes.Structure):
    """A call's tables of launches: `every` serving any stream, or (where it is NULL) one table a
    stream, `tables[n]` for `streams[n]`, n < `count`; the same layout as the IR's `%tables`."""

    _fields_ = [("every", ctypes.c_void_p), ("count", ctypes.c_int64),
                ("streams", ctypes.c_uint64 * STREAM_TABLES), ("tables", ctypes.c_void_p * STREAM_TABLES)]


def tables_type() -> ir.LiteralStructType:
    entry = ir.LiteralStructType([_CU_LAUNCH.as_pointer(), I8P, I8P, I32, I32, I32, I32]).as_pointer()  # LaunchEntry
    return ir.LiteralStructType([entry, I64, ir.ArrayType(I64, STREAM_TABLES), ir.ArrayType(entry, STREAM_TABLES)])


def emit_table_lookup(fn: ir.Function, b: ir.IRBuilder, tables: ir.Value, stream: ir.Value) -> ir.Value:
    """The table of launches on `stream`: `every`, else the one filed under the stream, else NULL."""
    field = lambda i: b.gep(tables, [I32(0), I32(i)], inbounds=True)  # noqa: E731
    every = b.load(field(0), name="every")
    null = ir.Constant(every.type, None)
    start = b.block
    search, test, matched, advance, done = (fn.append_basic_block(name) for name in
                                            ("search", "test", "matched", "advance", "found"))
    b.cbranch(b.icmp_unsigned("!=", every, null), done, search)
    b.position_at_end(search)
    count = b.load(field(1), name="streams")
    key = b.ptrtoint(stream, I64)
    b.branch(test)
    b.position_at_end(test)
    n = b.phi(I64, name="slot")
    n.add_incoming(I64(0), search)
    within = b.icmp_signed("<", n, count)
    b.cbranch(within, advance, done)
    b.position_at_end(advance)
    same = b.icmp_unsigned("==", b.load(b.gep(field(2), [I32(0), n], inbounds=True)), key)
    following = b.add(n, I64(1))
    n.add_incoming(following, advance)
    b.cbranch(same, matched, test)
    b.position_at_end(matched)
    own = b.load(b.gep(field(3), [I32(0), n], inbounds=True), name="own")
    b.branch(done)
    b.position_at_end(done)
    table = b.phi(every.type, name="table")
    table.add_incoming(every, start)
    table.add_incoming(null, test)
    table.add_incoming(own, matched)
    return table


def emit_stream_launches(fn: ir.Function, b: ir.IRBuilder, tables: ir.Value, count: ir.Value, stream: ir.Value,
                         finish: Callable[[ir.IRBuilder, ir.Value], None]) -> None:
    """`emit_launch_loop` over the stream's table; `finish(builder, NEW_STREAM)` where it has none."""
    table = emit_table_lookup(fn, b, tables, stream)
    with b.if_then(b.icmp_unsigned("==", table, ir.Constant(table.type, None)), likely=False):
        finish(b, I32(NEW_STREAM))
    emit_launch_loop(fn, b, table, count, stream, finish)


def emit_launch_loop(fn: ir.Function, b: ir.IRBuilder, table: ir.Value, count: ir.Value, stream: ir.Value,
                      finish: Callable[[ir.IRBuilder, ir.Value], None]) -> None:
    """Calls each entry's cuLaunchKernel in order, then `finish(builder, result)` with 0, or with
    `(n << 16) | code` as soon as launch n fails."""
    loop, body, failed, advance, done = (fn.append_basic_block(name)
                                         for name in ("loop", "body", "failed", "advance", "done"))
    start = b.block
    b.branch(loop)
    b.position_at_end(loop)
    n = b.phi(I32, name="n")
    n.add_incoming(I32(0), start)
    b.cbranch(b.icmp_signed("<", n, count), body, done)
    b.position_at_end(body)
    entry = b.gep(table, [n], inbounds=True)
    field = lambda i, name: b.load(b.gep(entry, [I32(0), I32(i)], inbounds=True), name=name)  # noqa: E731
    launch, function, params = field(0, "launch"), field(1, "function"), field(2, "params")
    grid, block, shared = field(3, "grid"), field(4, "block"), field(5, "shared")
    code = b.call(launch, [function, grid, I32(1), I32(1), block, I32(1), I32(1), shared, stream, params,
                           ir.Constant(I8P, None)], name="code")
    b.cbranch(b.icmp_unsigned("!=", code, I32(0)), failed, advance)
    b.position_at_end(failed)
    finish(b, b.or_(code, b.shl(n, I32(16))))
    b.position_at_end(advance)
    following = b.add(n, I32(1), name="following")
    n.add_incoming(following, advance)
    b.branch(loop)
    b.position_at_end(done)
    finish(b, I32(0))


def llvm_source() -> str:
    """The LLVM IR of `braze_launch_all`: the context check, then a loop over the stream's table."""
    module = ir.Module(name=NAME)
    fn = ir.Function(module, ir.FunctionType(I32, [context_check_type().as_pointer(), tables_type().as_pointer(),
                                                   I32, I8P]), name=NAME)
    context, tables, count, stream = fn.args
    b = ir.IRBuilder(fn.append_basic_block("start"))
    finish = emit_context_check(b, context, lambda b, code: b.ret(code))
    emit_stream_launches(fn, b, tables, count, stream, finish)
    return str(module)


@functools.cache
def _launch_all() -> Callable[[int, int, int], int]:
    if config.dumping("host_jit"):
        config.dump("host_jit", llvm_source())
    return LAUNCH_SIGNATURE(host_jit.compile_function(NAME, llvm_source))


class PatchSpec(ctypes.Structure):
    """What one patched launcher writes and runs; the same layout as the IR's `%spec`."""

    _fields_ = [("tables", ctypes.c_void_p), ("count", ctypes.c_int64), ("block", ctypes.c_void_p),
                ("slots", ctypes.c_void_p), ("slot_count", ctypes.c_int64), ("context", ctypes.c_void_p)]


def patched_llvm_source() -> str:
    """The LLVM IR of `braze_launch_patched(self, args, nargs)`: `self` is a Python int holding a
    PatchSpec's address, args[0] the stream, args[1:] the values for the spec's slots. Returns
    the launch loop's result as a Python int (NEW_STREAM where the stream has no table: the values
    are written, nothing is launched), -1 for a wrong argument count, or NULL with the exception
    set when an argument is not an int (nothing is launched then)."""
    module = ir.Module(name=PATCHED_NAME)
    api = host_jit.python_api(module)
    null = ir.Constant(host_jit.OBJECT, None)
    spec_type = ir.LiteralStructType([tables_type().as_pointer(), I64, I64.as_pointer(), I64.as_pointer(), I64,
                                      context_check_type().as_pointer()])
    fn = ir.Function(module, ir.FunctionType(host_jit.OBJECT, [host_jit.OBJECT, host_jit.OBJECT.as_pointer(), I64]),
                     name=PATCHED_NAME)
    self_, args, nargs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("start"))
    as_u64 = api["PyLong_AsUnsignedLongLongMask"]
    spec = b.inttoptr(b.call(as_u64, [self_]), spec_type.as_pointer(), name="spec")
    field = lambda i, name: b.load(b.gep(spec, [I32(0), I32(i)], inbounds=True), name=name)  # noqa: E731
    tables, count, block, slots, slot_count, context = (field(0, "tables"), field(1, "count"), field(2, "block"),
                                                        field(3, "slots"), field(4, "slot_count"), field(5, "context"))
    with b.if_then(b.icmp_signed("!=", nargs, b.add(slot_count, I64(1))), likely=False):
        b.ret(b.call(api["PyLong_FromLongLong"], [I64(-1)]))
    stream = b.inttoptr(b.call(as_u64, [b.load(args)]), I8P, name="stream")
    with host_jit.counted_loop(b, slot_count) as i:
        value = b.call(as_u64, [b.load(b.gep(args, [b.add(i, I64(1))], inbounds=True))], name="value")
        b.store(value, b.gep(block, [b.load(b.gep(slots, [i], inbounds=True))], inbounds=True))
    with b.if_then(b.icmp_unsigned("!=", b.call(api["PyErr_Occurred"], []), null), likely=False):
        b.ret(null)
    finish = lambda b, result: b.ret(b.call(api["PyLong_FromLongLong"], [b.sext(result, I64)]))  # noqa: E731
    emit_stream_launches(fn, b, tables, b.trunc(count, I32), stream, emit_context_check(b, context, finish))
    return str(module)


class NativeLaunches:
    """The launches of one prepared call: its tables, `call(stream)` running the stream's natively,
    and where `slots` are given, `patched(stream, *values)` writing the values into the argument
    block at `block_address` first (valid while this object, which holds the tables and spec,
    lives). Both make `driver.context` current first. With `stream` None, `launches` serve every
    stream; else they are that stream's, and `add_stream` gives other streams tables of their own."""

    def __init__(self, driver: DriverCalls, launches: Sequence[LaunchSpec], block_address: int = 0,
                 slots: Sequence[int] = (), stream: int | None = None) -> None:
        self.driver, self.count = driver, len(launches)
        self.context = ContextCheck(driver.get_context, driver.set_context, driver.context)
        self.tables = LaunchTables()
        self.held: list[tuple | None] = [None] * STREAM_TABLES  # per stream slot: its table, what it points into
        self._replaced = 0  # the slot a new stream takes once every slot is used
        self._lock = threading.Lock()
        if stream is None:
            self.table = self._table(launches)
            self.tables.every = ctypes.addressof(self.table)
        else:
            self.add_stream(stream, launches)
        self.call: Callable[[int], int] = functools.partial(_launch_all(), ctypes.addressof(self.context),
                                                            ctypes.addressof(self.tables), self.count)
        self.patched: Callable[..., int] | None = None
        if slots:
            self.slots = (ctypes.c_int64 * len(slots))(*slots)
            self.spec = PatchSpec(ctypes.addressof(self.tables), self.count, block_address,
                                  ctypes.addressof(self.slots), len(slots), ctypes.addressof(self.context))
            try:
                if host_jit.builtins_available():
                    self.patched = host_jit.new_builtin(host_jit.fastcall_method(PATCHED_NAME, patched_llvm_source),
                                                   ctypes.addressof(self.spec), self)
            except Exception as error:  # a JIT failure: the pointers are patched from Python
                host_jit.fall_back("the patched launches of a prepared call", error)

    def _table(self, launches: Sequence[LaunchSpec]) -> ctypes.Array:
        if config.dumping("host_jit"):
            config.dump("host_jit", "launch table:\n" + "".join(
                f"  function {function:#x} grid {grid} block {block} shared {shared} params {params:#x}\n"
                for function, grid, block, shared, params in launches))
        return (LaunchEntry * max(len(launches), 1))(
            *[LaunchEntry(self.driver.launch, function, params, grid, block, shared, 0)
              for function, grid, block, shared, params in launches])

    def add_stream(self, stream: int, launches: Sequence[LaunchSpec], keep: object = None) -> None:
        """Gives `stream` a table of its own: `launches`, as many as every stream's, with parameters
        of their own; `keep` holds what those point into for as long as the table is filed. Once
        STREAM_TABLES streams have one, the table filed longest ago makes room."""
        if len(launches) != self.count:
            raise ValueError(f"a stream's launches: expected {self.count}, got {len(launches)}")
        table, tables = self._table(launches), self.tables
        with self._lock:
            filed = list(tables.streams[:tables.count])
            if stream in filed:
                slot = filed.index(stream)
            elif tables.count < STREAM_TABLES:
                slot = tables.count
            else:
                slot, self._replaced = self._replaced, (self._replaced + 1) % STREAM_TABLES
            # Each store is one step under the GIL, and a native call may run between any two: the
            # slot matches no stream while its table changes, and counts only once it is complete.
            tables.streams[slot] = _NO_STREAM
            tables.tables[slot] = ctypes.addressof(table)
            self.held[slot] = (table, keep)
            tables.streams[slot] = stream
            tables.count = max(tables.count, slot + 1)

    def streams(self) -> list[int]:
        """The streams with a table of their own."""
        return list(self.tables.streams[:self.tables.count])


def native_launches(driver: DriverCalls, launches: Sequence[LaunchSpec], block_address: int = 0,
                    slots: Sequence[int] = (), stream: int | None = None) -> NativeLaunches | None:
    """`launches` made by one native call (on any stream, or with `stream` on that one: see
    NativeLaunches); None when the host JIT is off or fails."""
    if config.disabled("host_jit"):
        return None
    try:
        return NativeLaunches(driver, launches, block_address, slots, stream)
    except Exception as error:  # any JIT failure: the launches are made from Python instead
        host_jit.fall_back("the launches of a prepared call", error)
        return None
