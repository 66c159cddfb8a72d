"""The host JIT: a fusion's shape and stride program compiled to native code with llvmlite.

The native function has the C signature `int32 shapes(const int64 *extents, int64 *out)`: it
reads the input extents in `ShapeProgram.symbols` order, writes every output value and returns
0, or `n + 1` when step n would divide by zero (the caller then raises an error naming it).
Division follows Python's floor semantics, so native and Python results agree for any sign.

A host program's shape function runs in Python first and natively from its second run (host/shapes.py,
`TieredShapeFunction`); any failure to build the native function falls back to Python with one warning
per process. `BRAZE_DISABLE=host_jit` asks for Python directly, `BRAZE_DUMP=host_jit` prints the LLVM IR.

Host functions are named after their content and cached on disk like kernels, so a later process loads
them without LLVM's code generator (several milliseconds at its first use). They are called through
CPython builtins made here (below); where builtins are not made (no CPython C API, or no GIL) shape
functions stay in Python, which is then the faster of the two.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import llvmlite.binding as llvm
from llvmlite import ir

from braze import config
from braze.compile import disk_cache, elf, llvm_toolchain
from braze.errors import HostJitWarning

if TYPE_CHECKING:
    from braze.host.shapes import ShapeProgram, Step

I32, I64 = ir.IntType(32), ir.IntType(64)
_INT64_MIN = -(2**63)
_log = logging.getLogger(__name__)
_warned = False  # one warning per process: later failures go to the log


def function_name(program: ShapeProgram) -> str:
    """The name of the program's native function: its fusion's name and a digest of what it
    computes, the same in every process (the disk cache finds it by its IR, name included)."""
    digest = hashlib.sha256(repr((program.symbols, program.steps, program.outputs)).encode()).hexdigest()
    return f"braze_shapes_{re.sub(r'[^A-Za-z0-9_]', '_', program.name)}_{digest[:16]}"


# --- LLVM IR -------------------------------------------------------------------------------------------
class _Emitter:
    """Emits one shape program as one LLVM function."""

    def __init__(self, program: ShapeProgram, name: str) -> None:
        self.module = ir.Module(name=name)
        signature = ir.FunctionType(I32, [I64.as_pointer(), I64.as_pointer()])
        self.fn = ir.Function(self.module, signature, name=name)
        for arg in self.fn.args:
            arg.add_attribute("noalias")
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.values: list[ir.Value] = []

    def emit(self, program: ShapeProgram) -> str:
        for n, step in enumerate(program.steps):
            self.values.append(self.step(n, step))
        extents, out = self.fn.args
        for position, index in enumerate(program.outputs):
            self.b.store(self.values[index], self.b.gep(out, [I64(position)], inbounds=True))
        self.b.ret(I32(0))
        return str(self.module)

    def step(self, n: int, step: Step) -> ir.Value:
        if step.op == "const":
            return I64(step.args[0])
        if step.op == "input":
            return self.b.load(self.b.gep(self.fn.args[0], [I64(step.args[0])], inbounds=True), name=f"e{n}")
        a, b = (self.values[i] for i in step.args)
        return _OPS[step.op](self, n, a, b)

    def checked_divisor(self, n: int, a: ir.Value, b: ir.Value) -> None:
        """Returns n + 1 when `a / b` is undefined: b is 0, or INT64_MIN / -1 overflows."""
        zero = self.b.icmp_signed("==", b, I64(0))
        overflow = self.b.and_(self.b.icmp_signed("==", a, I64(_INT64_MIN)), self.b.icmp_signed("==", b, I64(-1)))
        fail = self.fn.append_basic_block(f"fail{n}")
        ok = self.fn.append_basic_block(f"step{n}")
        self.b.cbranch(self.b.or_(zero, overflow), fail, ok)
        ir.IRBuilder(fail).ret(I32(n + 1))
        self.b.position_at_end(ok)

    def floor_divmod(self, n: int, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Python's `a // b` and `a % b`: truncating division, moved down when the signs differ."""
        self.checked_divisor(n, a, b)
        q, r = self.b.sdiv(a, b), self.b.srem(a, b)
        signs_differ = self.b.icmp_signed("<", self.b.xor(r, b), I64(0))
        adjust = self.b.and_(self.b.icmp_signed("!=", r, I64(0)), signs_differ)
        return self.b.sub(q, self.b.zext(adjust, I64)), self.b.add(r, self.b.select(adjust, b, I64(0)))

    def select(self, predicate: str, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed(predicate, a, b), a, b)


_OPS = {
    "+": lambda e, n, a, b: e.b.add(a, b),
    "-": lambda e, n, a, b: e.b.sub(a, b),
    "*": lambda e, n, a, b: e.b.mul(a, b),
    "//": lambda e, n, a, b: e.floor_divmod(n, a, b)[0],
    "%": lambda e, n, a, b: e.floor_divmod(n, a, b)[1],
    "ceildiv": lambda e, n, a, b: e.b.neg(e.floor_divmod(n, e.b.neg(a), b)[0]),
    "min": lambda e, n, a, b: e.select("<", a, b),
    "max": lambda e, n, a, b: e.select(">", a, b),
}


def llvm_source(program: ShapeProgram, name: str) -> str:
    """The LLVM IR of the program's native shape function, called `name`."""
    return _Emitter(program, name).emit(program)


# --- native functions ------------------------------------------------------------------------------------
@functools.cache
def _engine() -> llvm.ExecutionEngine:
    """One engine for every shape function of the process.

    A shape function is a few dozen integer instructions: generating it at optimization level
    0 into a shared engine costs a few milliseconds, where an engine (and a target machine) of
    its own, or an optimized build, would cost several times that on every compiled signature.
    """
    return llvm_toolchain.new_engine(opt=0)


def _object_code(name: str, source: Callable[[], str]) -> bytes:
    """The object code of function `name`, from the disk cache or generated from `source()` (and
    then cached). Host functions are named after what they compute, and a change to braze's code
    generators changes braze's source hash, so the name keys the cache: a hit builds no IR."""
    key = disk_cache.cache_key(host_function=name, toolchain=llvm_toolchain.toolchain_id(),
                               braze=disk_cache.braze_source_hash())
    cached = disk_cache.load(key, elf.host_object_check((name,)))
    if cached is not None:
        return cached
    writer = llvm_toolchain.target_machine(opt=0)
    code = writer.emit_object(llvm_toolchain.parse(source(), f"host function {name!r}", writer))
    disk_cache.store(key, code)
    return code


_loaded: dict[str, int] = {}  # function name -> address: a second load of the same symbols would clash


def compile_function(name: str, source: Callable[[], str]) -> int:
    """The address of function `name`, whose LLVM IR `source()` gives, loaded into the shared
    engine once per process."""
    with llvm_toolchain.LLVM_LOCK:
        if name in _loaded:
            return _loaded[name]
        code = _object_code(name, source)
        engine = _engine()
        engine.add_object_file(llvm.ObjectFileRef.from_data(code))  # the engine keeps it for the process
        engine.finalize_object()
        address = engine.get_function_address(name)
        if not address:
            raise llvm_toolchain.CompileError(f"host function {name!r}: the engine has no code for it")
        _loaded[name] = address
    return address


# --- CPython builtins over native functions ----------------------------------------------------------
# A ctypes call converts each argument and result through Python objects of its own: about a
# microsecond a call on the GPU hosts, more than a shape program or the launches it runs. A builtin
# (a PyCFunction with METH_FASTCALL, its `self` a Python int holding the address of a spec struct)
# takes Python ints and returns Python objects directly, in a few dozen nanoseconds.
METH_FASTCALL = 0x0080  # PyMethodDef flag: (PyObject *self, PyObject *const *args, Py_ssize_t nargs)
METH_KEYWORDS = 0x0002  # with METH_FASTCALL: a fourth argument, the tuple of keyword names (or NULL)
OBJECT = ir.IntType(8).as_pointer()  # PyObject *
# The C API functions builtins may call, resolved in the process.
_PYTHON_API = {
    "PyLong_AsUnsignedLongLongMask": (I64, [OBJECT]), "PyLong_AsLongLong": (I64, [OBJECT]),
    "PyLong_FromLongLong": (OBJECT, [I64]), "PyErr_Occurred": (OBJECT, []), "PyErr_Clear": (ir.VoidType(), []),
    "PyList_New": (OBJECT, [I64]), "PyList_SetItem": (I32, [OBJECT, I64, OBJECT]), "PyList_Size": (I64, [OBJECT]),
    "PyList_GetItem": (OBJECT, [OBJECT, I64]), "PyTuple_Size": (I64, [OBJECT]),
    "PyTuple_GetItem": (OBJECT, [OBJECT, I64]), "PyDict_GetItem": (OBJECT, [OBJECT, OBJECT]),
    "PyObject_Vectorcall": (OBJECT, [OBJECT, OBJECT.as_pointer(), I64, OBJECT]),
    "Py_IncRef": (ir.VoidType(), [OBJECT]), "Py_DecRef": (ir.VoidType(), [OBJECT]),
}


class MethodDef(ctypes.Structure):
    """CPython's PyMethodDef."""

    _fields_ = [("name", ctypes.c_char_p), ("method", ctypes.c_void_p), ("flags", ctypes.c_int),
                ("doc", ctypes.c_char_p)]


def builtins_available() -> bool:
    """Whether builtins are made: CPython with a GIL (a builtin's stores into shared buffers are
    then atomic with respect to other threads)."""
    return hasattr(ctypes, "pythonapi") and getattr(sys, "_is_gil_enabled", lambda: True)()


def python_api(module: ir.Module) -> dict[str, ir.Function]:
    """Declarations of the C API functions in `module`."""
    return {name: ir.Function(module, ir.FunctionType(result, args), name=name)
            for name, (result, args) in _PYTHON_API.items()}


def python_api_available() -> bool:
    """Whether this interpreter exports every function builtins may call (PyObject_Vectorcall is
    an inline function, not an export, on some older CPythons)."""
    return all(hasattr(ctypes.pythonapi, symbol) for symbol in _PYTHON_API)


@functools.cache
def fastcall_method(name: str, source: Callable[[], str], keywords: bool = False) -> MethodDef:
    """The method definition of builtin `name` (LLVM IR from `source()`; `keywords`: it also
    takes the keyword names), kept for the process: builtins made from it point at it."""
    for symbol in _PYTHON_API:  # the loaded object's calls into the interpreter resolve to these
        if hasattr(ctypes.pythonapi, symbol):
            llvm.add_symbol(symbol, ctypes.cast(getattr(ctypes.pythonapi, symbol), ctypes.c_void_p).value)
    if config.dumping("host_jit"):
        config.dump("host_jit", source())
    flags = METH_FASTCALL | (METH_KEYWORDS if keywords else 0)
    return MethodDef(name.encode(), compile_function(name, source), flags, None)


class _SpecAddress(int):
    """A builtin's `self`: the address of its spec, holding the object that owns the spec, so the
    builtin keeps it alive."""


def new_builtin(method: MethodDef, spec_address: int, owner: object) -> Callable[..., object]:
    """A builtin running `method` with `self` the int `spec_address`, keeping `owner` (which
    holds the spec and whatever it points at) alive as long as the builtin lives."""
    new = ctypes.pythonapi.PyCFunction_NewEx
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
    address = _SpecAddress(spec_address)
    # The builtin reads its definition through a raw pointer: it holds the definition too (threads
    # racing on `fastcall_method`'s first call each get one of their own, and only one is cached).
    address.owner, address.method = owner, method
    return new(ctypes.addressof(method), address, None)


SHAPE_CALL = "braze_shape_call"


class ShapeSpec(ctypes.Structure):
    """What the shape-call builtin runs; the same layout as the IR's `%spec`."""

    _fields_ = [("function", ctypes.c_void_p), ("inputs", ctypes.c_int64), ("outputs", ctypes.c_int64),
                ("extents", ctypes.c_void_p), ("values", ctypes.c_void_p)]


def shape_call_source() -> str:
    """The LLVM IR of `braze_shape_call(self, args, nargs)`: stores the int arguments as the
    spec's extents, runs its shape function and returns its outputs as a list of ints; the shape
    function's failure code (or -1 for a wrong argument count) as an int; or NULL with the
    exception set when an argument is no int of 64 bits."""
    module = ir.Module(name=SHAPE_CALL)
    api = python_api(module)
    shape_fn = ir.FunctionType(I32, [I64.as_pointer(), I64.as_pointer()])
    spec_type = ir.LiteralStructType([shape_fn.as_pointer(), I64, I64, I64.as_pointer(), I64.as_pointer()])
    fn = ir.Function(module, ir.FunctionType(OBJECT, [OBJECT, OBJECT.as_pointer(), I64]), name=SHAPE_CALL)
    self_, args, nargs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("start"))
    spec = b.inttoptr(b.call(api["PyLong_AsUnsignedLongLongMask"], [self_]), spec_type.as_pointer(), name="spec")
    field = lambda i, name: b.load(b.gep(spec, [I32(0), I32(i)], inbounds=True), name=name)  # noqa: E731
    function, inputs, outputs, extents, values = (field(0, "function"), field(1, "inputs"), field(2, "outputs"),
                                                  field(3, "extents"), field(4, "values"))
    with b.if_then(b.icmp_signed("!=", nargs, inputs), likely=False):
        b.ret(b.call(api["PyLong_FromLongLong"], [I64(-1)]))
    with counted_loop(b, inputs) as i:
        value = b.call(api["PyLong_AsLongLong"], [b.load(b.gep(args, [i], inbounds=True))])
        b.store(value, b.gep(extents, [i], inbounds=True))
    with b.if_then(b.icmp_unsigned("!=", b.call(api["PyErr_Occurred"], []), ir.Constant(OBJECT, None)),
                   likely=False):
        b.ret(ir.Constant(OBJECT, None))
    code = b.call(function, [extents, values], name="code")
    with b.if_then(b.icmp_signed("!=", code, I32(0)), likely=False):
        b.ret(b.call(api["PyLong_FromLongLong"], [b.sext(code, I64)]))
    result = b.call(api["PyList_New"], [outputs], name="result")
    with b.if_then(b.icmp_unsigned("==", result, ir.Constant(OBJECT, None)), likely=False):
        b.ret(result)
    with counted_loop(b, outputs) as i:
        item = b.call(api["PyLong_FromLongLong"], [b.load(b.gep(values, [i], inbounds=True))], name="item")
        with b.if_then(b.icmp_unsigned("==", item, ir.Constant(OBJECT, None)), likely=False):
            b.call(api["Py_DecRef"], [result])
            b.ret(ir.Constant(OBJECT, None))
        b.call(api["PyList_SetItem"], [result, i, item])  # takes the item's reference
    b.ret(result)
    return str(module)


class counted_loop:  # noqa: N801  (named as the statement it is: `with counted_loop(b, n) as i:`)
    """`for (i = 0; i < count; ++i) { body }` around the `with` body, at the builder's position."""

    def __init__(self, b: ir.IRBuilder, count: ir.Value) -> None:
        self.b, self.count = b, count

    def __enter__(self) -> ir.Value:
        b = self.b
        fn = b.block.function
        self.before, self.head = b.block, fn.append_basic_block("loop")
        self.body, self.after = fn.append_basic_block("body"), fn.append_basic_block("after")
        b.branch(self.head)
        b.position_at_end(self.head)
        self.i = b.phi(I64, name="i")
        self.i.add_incoming(I64(0), self.before)
        b.cbranch(b.icmp_signed("<", self.i, self.count), self.body, self.after)
        b.position_at_end(self.body)
        return self.i

    def __exit__(self, *exc) -> None:
        b = self.b
        self.i.add_incoming(b.add(self.i, I64(1)), b.block)
        b.branch(self.head)
        b.position_at_end(self.after)


class NativeShapeFunction:
    """A shape program compiled to native code, called through a builtin."""

    native = True

    def __init__(self, program: ShapeProgram) -> None:
        self.program = program
        name = function_name(program)
        if config.dumping("host_jit"):
            config.dump("host_jit", llvm_source(program, name))
        address = compile_function(name, lambda: llvm_source(program, name))
        # One pair of buffers: a builtin call holds the GIL from its first store to its last read.
        self._extents = (ctypes.c_int64 * max(len(program.symbols), 1))()
        self._values = (ctypes.c_int64 * max(len(program.outputs), 1))()
        self._spec = ShapeSpec(address, len(program.symbols), len(program.outputs),
                               ctypes.addressof(self._extents), ctypes.addressof(self._values))
        self._builtin = new_builtin(fastcall_method(SHAPE_CALL, shape_call_source), ctypes.addressof(self._spec), self)

    def __call__(self, extents: Sequence[int]) -> list[int]:
        values = self._builtin(*extents)
        if values.__class__ is int:  # a step's failure code
            raise self.program.explain_failure(extents)
        return values


def fall_back(what: str, error: Exception) -> None:
    """Warns, once per process, that the host JIT failed for `what`, which then runs in Python."""
    global _warned
    message = f"host JIT failed for {what}, running it in Python: {error}"
    if _warned:
        _log.info(message)
        return
    _warned = True
    warnings.warn(message + " (warned once; BRAZE_DISABLE=host_jit silences this)", HostJitWarning, stacklevel=3)
