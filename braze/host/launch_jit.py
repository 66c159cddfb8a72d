"""The launches of a prepared call made by one native function, compiled with llvmlite once per
process:

    int32 braze_launch_all(const LaunchEntry *table, int32 count, CUstream stream)

calls each entry's `cuLaunchKernel` (its address, taken from the driver, is in the entry) with the
entry's function handle, grid, block, shared memory and parameter array, in order, and returns 0,
or `(n << 16) | code` when launch n failed with CUresult `code` (the caller raises the error
naming it). One ctypes call from Python then runs every kernel of a fusion: a dozen launches cost
one crossing into native code instead of a dozen. A prepared call only fills a table: nothing is
compiled per fusion or per shape.

Any failure to build it leaves the caller launching from Python (`native_launches` answers None
and the host JIT warns once); `BRAZE_DISABLE=host_jit` asks for that directly, `BRAZE_DUMP=host_jit`
prints the LLVM IR once and each table as it is made.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence

from llvmlite import ir

from braze import config
from braze.host import jit

I32, I64, I8P = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
# The signature of cuLaunchKernel: function, grid x/y/z, block x/y/z, shared bytes, stream,
# kernel parameters, extra.
_CU_LAUNCH = ir.FunctionType(I32, [I8P, *[I32] * 7, I8P, I8P, I8P])
# PYFUNCTYPE keeps the GIL: a launch takes microseconds, less than releasing and taking it back.
LAUNCH_SIGNATURE = ctypes.PYFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p)
LaunchSpec = tuple[int, int, int, int, int]  # (function handle, grid, block, shared bytes, params address)
NAME = "braze_launch_all"


class LaunchEntry(ctypes.Structure):
    """One launch of a table; the same layout as the IR's `%entry`."""

    _fields_ = [("launch", ctypes.c_void_p), ("function", ctypes.c_void_p), ("params", ctypes.c_void_p),
                ("grid", ctypes.c_uint32), ("block", ctypes.c_uint32), ("shared", ctypes.c_uint32),
                ("unused", ctypes.c_uint32)]


def llvm_source() -> str:
    """The LLVM IR of `braze_launch_all`: a loop over the table."""
    module = ir.Module(name=NAME)
    entry_type = ir.LiteralStructType([_CU_LAUNCH.as_pointer(), I8P, I8P, I32, I32, I32, I32])
    fn = ir.Function(module, ir.FunctionType(I32, [entry_type.as_pointer(), I32, I8P]), name=NAME)
    table, count, stream = fn.args
    start, loop, body, failed, advance, done = (fn.append_basic_block(n) for n in
                                                ("start", "loop", "body", "failed", "advance", "done"))
    b = ir.IRBuilder(start)
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
    b.ret(b.or_(code, b.shl(n, I32(16))))
    b.position_at_end(advance)
    following = b.add(n, I32(1), name="following")
    n.add_incoming(following, advance)
    b.branch(loop)
    b.position_at_end(done)
    b.ret(I32(0))
    return str(module)


@functools.cache
def _launch_all() -> Callable[[int, int, int], int]:
    if config.dumping("host_jit"):
        config.dump("host_jit", llvm_source())
    return LAUNCH_SIGNATURE(jit.compile_function(NAME, llvm_source))


class NativeLaunches:
    """The launches of one prepared call: a table, and `call(stream)` running it natively (valid
    while this object, which holds the table, lives)."""

    def __init__(self, cu_launch_kernel: int, launches: Sequence[LaunchSpec]) -> None:
        self.table = (LaunchEntry * max(len(launches), 1))(
            *[LaunchEntry(cu_launch_kernel, function, params, grid, block, shared, 0)
              for function, grid, block, shared, params in launches])
        if config.dumping("host_jit"):
            config.dump("host_jit", "launch table:\n" + "".join(
                f"  function {function:#x} grid {grid} block {block} shared {shared} params {params:#x}\n"
                for function, grid, block, shared, params in launches))
        self.call: Callable[[int], int] = functools.partial(_launch_all(), ctypes.addressof(self.table),
                                                            len(launches))


def native_launches(cu_launch_kernel: int | None, launches: Sequence[LaunchSpec]) -> NativeLaunches | None:
    """`launches` made by one native call; None when the host JIT is off or fails."""
    if cu_launch_kernel is None or config.disabled("host_jit"):
        return None
    try:
        return NativeLaunches(cu_launch_kernel, launches)
    except Exception as error:  # any JIT failure: the launches are made from Python instead
        jit.fall_back("the launches of a prepared call", error)
        return None
