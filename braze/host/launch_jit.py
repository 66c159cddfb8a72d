"""The launches of a prepared call compiled to one native function with llvmlite.

    int32 launch_all(CUstream stream)

calls `cuLaunchKernel` (its address, taken from the driver library, is a constant of the code)
once per launch, with the function handle, grid, block, shared memory and parameter array of
each baked in, and returns 0, or `(n << 16) | code` when launch n failed with CUresult `code`
(the caller raises the error naming it). One ctypes call from Python then runs every kernel of
a fusion: a dozen launches cost one crossing into native code instead of a dozen.

Any failure to build it leaves the caller launching from Python (`native_launches` answers None
and the host JIT warns once); `BRAZE_DISABLE=host_jit` asks for that directly, `BRAZE_DUMP=host_jit`
prints the LLVM IR.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable, Sequence

from llvmlite import ir

from braze import config
from braze.host import jit

I32, I64, I8P = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
# The signature of cuLaunchKernel: function, grid x/y/z, block x/y/z, shared bytes, stream,
# kernel parameters, extra.
_CU_LAUNCH = ir.FunctionType(I32, [I8P, *[I32] * 7, I8P, I8P, I8P])
# PYFUNCTYPE keeps the GIL: a launch takes microseconds, less than releasing and taking it back.
LAUNCH_SIGNATURE = ctypes.PYFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)
LaunchSpec = tuple[int, int, int, int, int]  # (function handle, grid, block, shared bytes, params address)
_serial = itertools.count()


def llvm_source(name: str, cu_launch_kernel: int, launches: Sequence[LaunchSpec]) -> str:
    """The LLVM IR of `launch_all`, called `name`, for `launches` in order."""
    module = ir.Module(name=name)
    fn = ir.Function(module, ir.FunctionType(I32, [I8P]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    launch = b.inttoptr(I64(cu_launch_kernel), _CU_LAUNCH.as_pointer(), name="cuLaunchKernel")
    (stream,) = fn.args
    for n, (function, grid, block, shared, params) in enumerate(launches):
        code = b.call(launch, [b.inttoptr(I64(function), I8P), I32(grid), I32(1), I32(1), I32(block), I32(1), I32(1),
                               I32(shared), stream, b.inttoptr(I64(params), I8P), ir.Constant(I8P, None)],
                      name=f"code{n}")
        failed = fn.append_basic_block(f"failed{n}")
        next_launch = fn.append_basic_block(f"launch{n + 1}")
        b.cbranch(b.icmp_unsigned("!=", code, I32(0)), failed, next_launch)
        failure = ir.IRBuilder(failed)
        failure.ret(failure.or_(code, I32(n << 16)))
        b.position_at_end(next_launch)
    b.ret(I32(0))
    return str(module)


class NativeLaunches:
    """The launches of one prepared call as one native function of the stream."""

    def __init__(self, cu_launch_kernel: int, launches: Sequence[LaunchSpec]) -> None:
        name = f"braze_launch_all_{next(_serial)}"
        self.source = llvm_source(name, cu_launch_kernel, launches)
        if config.dumping("host_jit"):
            config.dump("host_jit", self.source)
        self.call: Callable[[int], int] = LAUNCH_SIGNATURE(jit.compile_function(self.source, name))


def native_launches(cu_launch_kernel: int | None, launches: Sequence[LaunchSpec]) -> NativeLaunches | None:
    """`launches` compiled into one native function; None when the host JIT is off or fails."""
    if cu_launch_kernel is None or config.disabled("host_jit"):
        return None
    try:
        return NativeLaunches(cu_launch_kernel, launches)
    except Exception as error:  # any JIT failure: the launches are made from Python instead
        jit.fall_back("the launches of a prepared call", error)
        return None
