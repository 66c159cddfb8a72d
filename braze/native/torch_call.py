"""A prepared GPU call on torch tensors as one native function, `braze_torch_call(inputs) -> [outputs]`:
the checks, the allocation of the outputs, the patching and the launches, with no Python between them.

`Fusion.execute` calls it first on the fusion whose call was taken last (runtime/fast_call.py). It
checks each tensor against the description the call was prepared for, allocates each output through
torch's caching allocator on the device's current stream (as `torch.empty_strided` does) and runs that
stream's launch table (native/launch_jit.py). What it declines goes to the spec's `fallback`, the
Python path, which says why where something is wrong.

Tensors are read and made through PyTorch's C shim (the `aoti_torch_*` functions libtorch exports
with C linkage for compiled programs) and wrapped as Python objects by `THPVariable_Wrap`. A tensor's
`at::Tensor` lies right after its Python object's header: `torch_api` checks that and the shim's
answers before any native code reads one, and makes no builtin where anything differs in this torch.
One function, compiled once per process and kept in the disk cache, serves every prepared call (a spec
struct describes each).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llvmlite import ir

from braze import config
from braze.native import host_jit
from braze.native.launch_jit import NativeLaunches, emit_launch_loop, emit_table_lookup, tables_type

NAME = "braze_torch_call"
I32, I64, I8P = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
OBJECT = host_jit.OBJECT
TYPE_OFFSET = ctypes.sizeof(ctypes.c_ssize_t)  # PyObject: the reference count, then the type
HEADER = object.__basicsize__  # a tensor's at::Tensor comes right after the object header

# The shim functions a call uses, with their LLVM types (they return 0 on success). `stream` is
# the CUDA one, from libtorch_cuda; the others are libtorch_cpu's.
_SHIM = {
    "get_data_ptr": ("aoti_torch_get_data_ptr", ir.FunctionType(I32, [I8P, I8P.as_pointer()])),
    "get_dim": ("aoti_torch_get_dim", ir.FunctionType(I32, [I8P, I64.as_pointer()])),
    "get_sizes": ("aoti_torch_get_sizes", ir.FunctionType(I32, [I8P, I64.as_pointer().as_pointer()])),
    "get_strides": ("aoti_torch_get_strides", ir.FunctionType(I32, [I8P, I64.as_pointer().as_pointer()])),
    "get_dtype": ("aoti_torch_get_dtype", ir.FunctionType(I32, [I8P, I32.as_pointer()])),
    "get_device_type": ("aoti_torch_get_device_type", ir.FunctionType(I32, [I8P, I32.as_pointer()])),
    "get_device_index": ("aoti_torch_get_device_index", ir.FunctionType(I32, [I8P, I32.as_pointer()])),
    "empty_strided": ("aoti_torch_empty_strided", ir.FunctionType(
        I32, [I64, I64.as_pointer(), I64.as_pointer(), I32, I32, I32, I8P.as_pointer()])),
    "delete": ("aoti_torch_delete_tensor_object", ir.FunctionType(I32, [I8P])),
    "wrap": ("THPVariable_Wrap", ir.FunctionType(OBJECT, [I8P])),
    "stream": ("aoti_torch_get_current_cuda_stream", ir.FunctionType(I32, [I32, I8P.as_pointer()])),
}
# THPVariable_Wrap's C++ names, newest first. Each takes the tensor by address (a reference, or a
# by-value class the caller keeps and destroys), so the caller deletes its handle after.
_WRAP_SYMBOLS = ("_Z16THPVariable_WrapRKN2at10TensorBaseE", "_Z16THPVariable_WrapN2at10TensorBaseE",
                 "_Z16THPVariable_WrapON2at10TensorBaseE")


class Api(ctypes.Structure):
    """The addresses of the shim functions; the same layout as the IR's `%api`."""

    _fields_ = [(field, ctypes.c_void_p) for field in _SHIM]


class TensorCheck(ctypes.Structure):
    """What one tensor input must be; the same layout as the IR's `%check`."""

    _fields_ = [("position", ctypes.c_int64), ("type", ctypes.c_void_p), ("dim", ctypes.c_int64),
                ("sizes", ctypes.c_void_p), ("strides", ctypes.c_void_p), ("dtype", ctypes.c_int32),
                ("device_type", ctypes.c_int32), ("device_index", ctypes.c_int32), ("unused", ctypes.c_int32)]


class OutputAllocation(ctypes.Structure):
    """One output to allocate; the same layout as the IR's `%output`."""

    _fields_ = [("dim", ctypes.c_int64), ("sizes", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("dtype", ctypes.c_int32), ("device_type", ctypes.c_int32), ("device_index", ctypes.c_int32),
                ("unused", ctypes.c_int32)]


class CallSpec(ctypes.Structure):
    """One prepared call; the same layout as the IR's `%spec`."""

    _fields_ = [("api", ctypes.c_void_p), ("tuple_type", ctypes.c_void_p), ("list_type", ctypes.c_void_p),
                ("arity", ctypes.c_int64),
                ("checks", ctypes.c_void_p), ("check_count", ctypes.c_int64),
                ("outputs", ctypes.c_void_p), ("output_count", ctypes.c_int64),
                ("returned", ctypes.c_void_p), ("returned_count", ctypes.c_int64),
                ("tables", ctypes.c_void_p), ("launch_count", ctypes.c_int64), ("block", ctypes.c_void_p),
                ("slots", ctypes.c_void_p), ("sources", ctypes.c_void_p), ("slot_count", ctypes.c_int64),
                ("device_index", ctypes.c_int64),
                # the conditions of taking it, and the Python functions taking over where they fail
                ("config_dict", ctypes.c_void_p), ("config_key", ctypes.c_void_p), ("settings", ctypes.c_void_p),
                ("open_recordings", ctypes.c_void_p), ("context_getter", ctypes.c_void_p),
                ("context", ctypes.c_void_p), ("fallback", ctypes.c_void_p), ("failed", ctypes.c_void_p)]


def ir_struct_types() -> tuple[ir.LiteralStructType, ...]:
    """The IR's `%api`, `%check`, `%output` and `%spec`, in the layouts of `Api`, `TensorCheck`,
    `OutputAllocation` and `CallSpec`."""
    api = ir.LiteralStructType([fn.as_pointer() for _, fn in _SHIM.values()])
    i64p = I64.as_pointer()
    check = ir.LiteralStructType([I64, I8P, I64, i64p, i64p, I32, I32, I32, I32])
    output = ir.LiteralStructType([I64, i64p, i64p, I32, I32, I32, I32])
    context_getter = ir.FunctionType(I32, [I8P.as_pointer()]).as_pointer()
    spec = ir.LiteralStructType([api.as_pointer(), I8P, I8P, I64, check.as_pointer(), I64, output.as_pointer(), I64,
                                 i64p, I64, tables_type().as_pointer(), I64, i64p, i64p, i64p, I64, I64,
                                 OBJECT, OBJECT, OBJECT, i64p, context_getter, I8P, OBJECT, OBJECT])
    return api, check, output, spec


# --- the native function ------------------------------------------------------------------------
class _Emitter:
    """Emits `braze_torch_call`. Every way out that returns no outputs goes through `fail`, which
    drops the outputs made so far, then calls the spec's `fallback` with the call's own arguments
    (result 0: nothing was launched) or its `failed` with the launch loop's code."""

    def __init__(self) -> None:
        self.module = ir.Module(name=NAME)
        self.api_calls = host_jit.python_api(self.module)
        spec_type = ir_struct_types()[-1]
        self.fn = ir.Function(self.module, ir.FunctionType(OBJECT, [OBJECT, OBJECT.as_pointer(), I64, OBJECT]),
                              name=NAME)
        self_, self.args, self.nargs, self.kwnames = self.fn.args
        self.b = ir.IRBuilder(self.fn.append_basic_block("start"))
        self.fail = self.fn.append_basic_block("fail")
        self.spec = self.b.inttoptr(self.call_api("PyLong_AsUnsignedLongLongMask", self_), spec_type.as_pointer())
        self.api = self.spec_field("api")
        # The getters' answers, made once here: an alloca inside a loop would grow the stack.
        self.answer = {str(ty): self.b.alloca(ty) for ty in (I32, I64, I64.as_pointer(), I8P)}
        self.stream, self.new_tensor = self.b.alloca(I8P, name="stream"), self.b.alloca(I8P, name="new")
        self.context, self.code = self.b.alloca(I8P, name="context"), self.b.alloca(OBJECT, name="code")
        with self.b.goto_block(self.fail):
            self.result = self.b.phi(I64, name="result")

    # helpers
    def call_api(self, name: str, *args: ir.Value) -> ir.Value:
        return self.b.call(self.api_calls[name], list(args))

    def field(self, struct: ir.Value, layout: type[ctypes.Structure], name: str) -> ir.Value:
        """Loads field `name` of `struct`, whose layout the ctypes structure `layout` mirrors."""
        n = [field for field, _ in layout._fields_].index(name)
        return self.b.load(self.b.gep(struct, [I32(0), I32(n)], inbounds=True), name=name)

    def spec_field(self, name: str) -> ir.Value:
        return self.field(self.spec, CallSpec, name)

    def at(self, array: ir.Value, index: ir.Value) -> ir.Value:
        return self.b.gep(array, [index], inbounds=True)

    def shim(self, name: str, *args: ir.Value) -> ir.Value:
        return self.b.call(self.field(self.api, Api, name), list(args))

    def fail_unless(self, condition: ir.Value, result: ir.Value | None = None) -> None:
        """Goes on where `condition` holds; else to `fail` with `result` (0: declined)."""
        following = self.fn.append_basic_block("ok")
        self.result.add_incoming(I64(0) if result is None else result, self.b.block)
        self.b.cbranch(condition, following, self.fail)
        self.b.position_at_end(following)

    def succeeded(self, code: ir.Value) -> None:
        self.fail_unless(self.b.icmp_signed("==", code, I32(0)))

    def read(self, name: str, handle: ir.Value, ty: ir.Type) -> ir.Value:
        """A shim getter's answer about `handle` (declining where it fails)."""
        answer = self.answer[str(ty)]
        self.succeeded(self.shim(name, handle, answer))
        return self.b.load(answer)

    def same(self, a: ir.Value, b: ir.Value) -> None:
        self.fail_unless(self.b.icmp_unsigned("==", a, b))

    # the function
    def emit(self) -> str:
        b = self.b
        checks, check_count = self.spec_field("checks"), self.spec_field("check_count")
        outputs, output_count = self.spec_field("outputs"), self.spec_field("output_count")
        values = b.alloca(I64, size=b.add(b.add(check_count, output_count), I64(1)), name="values")
        made = b.alloca(OBJECT, size=b.add(output_count, I64(1)), name="made")
        with host_jit.counted_loop(b, output_count) as n:
            b.store(ir.Constant(OBJECT, None), self.at(made, n))
        self.check_conditions()
        inputs = b.load(self.args, name="inputs")
        is_tuple = b.icmp_unsigned("==", self.type_of(inputs), self.spec_field("tuple_type"))
        is_list = b.icmp_unsigned("==", self.type_of(inputs), self.spec_field("list_type"))
        self.fail_unless(b.or_(is_tuple, is_list))
        size, item = (b.select(is_tuple, self.api_calls[f"PyTuple_{name}"], self.api_calls[f"PyList_{name}"])
                      for name in ("Size", "GetItem"))
        self.same(b.call(size, [inputs]), self.spec_field("arity"))
        with host_jit.counted_loop(b, check_count) as k:
            self.check_input(b.call(item, [inputs, self.field(self.at(checks, k), TensorCheck, "position")]),
                             self.at(checks, k), self.at(values, k))
        self.succeeded(self.shim("stream", b.trunc(self.spec_field("device_index"), I32), self.stream))
        with host_jit.counted_loop(b, output_count) as n:
            self.allocate(self.at(outputs, n), self.at(values, b.add(check_count, n)), self.at(made, n))
        # The stream's table (a call whose kernels take a workspace has one per stream): where this
        # stream has none yet, the Python call files one. (No Python runs from here to the launches.)
        stream = b.load(self.stream)
        table = emit_table_lookup(self.fn, b, self.spec_field("tables"), stream)
        self.fail_unless(b.icmp_unsigned("!=", table, ir.Constant(table.type, None)))
        with host_jit.counted_loop(b, self.spec_field("slot_count")) as s:
            value = b.load(self.at(values, b.load(self.at(self.spec_field("sources"), s))))
            b.store(value, self.at(self.spec_field("block"), b.load(self.at(self.spec_field("slots"), s))))
        emit_launch_loop(self.fn, b, table, b.trunc(self.spec_field("launch_count"), I32), stream,
                         lambda b, code: self.launched(code, made, output_count))
        self.emit_fail(made, output_count)
        return str(self.module)

    def check_conditions(self) -> None:
        """Goes on only for one positional argument, under the configuration the call was prepared
        in, with nothing recording, and with the call's CUDA context current on this thread."""
        b = self.b
        self.same(self.kwnames, ir.Constant(OBJECT, None))
        self.same(self.nargs, I64(1))
        setting = self.call_api("PyDict_GetItem", self.spec_field("config_dict"), self.spec_field("config_key"))
        self.same(setting, self.spec_field("settings"))
        self.same(b.load(self.spec_field("open_recordings")), I64(0))
        self.succeeded(b.call(self.spec_field("context_getter"), [self.context]))
        self.same(b.load(self.context), self.spec_field("context"))

    def type_of(self, obj: ir.Value) -> ir.Value:
        return self.b.load(self.b.bitcast(self.b.gep(obj, [I64(TYPE_OFFSET)]), I8P.as_pointer()))

    def check_input(self, tensor: ir.Value, check: ir.Value, value: ir.Value) -> None:
        """Declines unless `tensor` is described as `check` says; stores its data pointer."""
        b = self.b
        self.same(self.type_of(tensor), self.field(check, TensorCheck, "type"))
        handle = b.gep(tensor, [I64(HEADER)], name="handle")
        dim = self.field(check, TensorCheck, "dim")
        self.same(self.read("get_dim", handle, I64), dim)
        for name in ("dtype", "device_type", "device_index"):
            self.same(self.read(f"get_{name}", handle, I32), self.field(check, TensorCheck, name))
        for name in ("sizes", "strides"):
            actual, expected = self.read(f"get_{name}", handle, I64.as_pointer()), self.field(check, TensorCheck, name)
            with host_jit.counted_loop(b, dim) as d:
                self.same(b.load(self.at(actual, d)), b.load(self.at(expected, d)))
        b.store(b.ptrtoint(self.read("get_data_ptr", handle, I8P), I64), value)

    def allocate(self, output: ir.Value, value: ir.Value, made: ir.Value) -> None:
        """Makes one output: its tensor, its data pointer in `value`, its Python object in `made`."""
        b = self.b
        layout = [self.field(output, OutputAllocation, name)
                  for name in ("dim", "sizes", "strides", "dtype", "device_type", "device_index")]
        self.succeeded(self.shim("empty_strided", *layout, self.new_tensor))
        handle = b.load(self.new_tensor, name="tensor")
        pointer = self.answer[str(I8P)]
        code = self.shim("get_data_ptr", handle, pointer)
        obj = self.shim("wrap", handle)  # a new reference, holding its own copy of the tensor
        self.shim("delete", handle)
        b.store(obj, made)
        self.succeeded(code)
        self.fail_unless(b.icmp_unsigned("!=", obj, ir.Constant(OBJECT, None)))
        b.store(b.ptrtoint(b.load(pointer), I64), value)

    def launched(self, code: ir.Value, made: ir.Value, output_count: ir.Value) -> None:
        """After the launch loop: the failed launch's code to `fail`, else the list of outputs.
        (The loop calls this once with the code of a failed launch, then once with 0.)"""
        b = self.b
        if not isinstance(code, ir.Constant):
            self.result.add_incoming(b.zext(code, I64), b.block)
            b.branch(self.fail)
            return
        returned, count = self.spec_field("returned"), self.spec_field("returned_count")
        result = self.call_api("PyList_New", count)
        with b.if_then(b.icmp_unsigned("==", result, ir.Constant(OBJECT, None)), likely=False):
            self.drop(made, output_count)  # launched already: the MemoryError goes to the caller
            b.ret(result)
        with host_jit.counted_loop(b, count) as i:
            obj = b.load(self.at(made, b.load(self.at(returned, i))))
            self.call_api("Py_IncRef", obj)
            self.call_api("PyList_SetItem", result, i, obj)  # takes the reference just added
        self.drop(made, output_count)
        b.ret(result)

    def emit_fail(self, made: ir.Value, output_count: ir.Value) -> None:
        b = self.b
        b.position_at_end(self.fail)
        self.drop(made, output_count)
        self.call_api("PyErr_Clear")  # a failed wrap: the Python path meets it again and says so
        null = ir.Constant(OBJECT, None)
        with b.if_then(b.icmp_unsigned("==", self.result, I64(0))):
            b.ret(self.call_api("PyObject_Vectorcall", self.spec_field("fallback"), self.args, self.nargs,
                                self.kwnames))
        code = self.call_api("PyLong_FromLongLong", self.result)
        with b.if_then(b.icmp_unsigned("==", code, null), likely=False):
            b.ret(null)
        b.store(code, self.code)
        answer = self.call_api("PyObject_Vectorcall", self.spec_field("failed"), self.code, I64(1), null)
        self.call_api("Py_DecRef", code)
        b.ret(answer)

    def drop(self, made: ir.Value, output_count: ir.Value) -> None:
        with host_jit.counted_loop(self.b, output_count) as n:
            self.call_api("Py_DecRef", self.b.load(self.at(made, n)))  # NULL where none was made


def llvm_source() -> str:
    """The LLVM IR of `braze_torch_call`."""
    return _Emitter().emit()


# --- torch's side ---------------------------------------------------------------------------------
class TorchApi:
    """The shim's addresses in this process, and the codes it gives dtypes."""

    def __init__(self, api: Api, torch: object) -> None:
        self.api, self.torch = api, torch
        self._codes: dict[tuple, tuple[int, int, int]] = {}

    def codes(self, dtype: object, device: object) -> tuple[int, int, int]:
        """The shim's codes of a torch dtype and device: (dtype, device type, device index), read
        from an empty tensor of them."""
        key = (dtype, device)
        if key not in self._codes:
            probe = self.torch.empty(0, dtype=dtype, device=device)
            self._codes[key] = tuple(_read(getter, ctypes.c_int32, probe) for getter in
                                     (self.api.get_dtype, self.api.get_device_type, self.api.get_device_index))
        return self._codes[key]


def _read(getter: int, ty: type, tensor: object) -> object:
    """A shim getter's answer about `tensor`, called through ctypes (at preparation only)."""
    answer = ty()
    function = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)(getter)
    if function(id(tensor) + HEADER, ctypes.addressof(answer)) != 0:
        raise ValueError(f"the shim could not read {tensor!r}")
    return answer.value


def _library_functions(torch) -> dict[str, int]:
    """The shim's addresses from torch's shared libraries (no CUDA stream in a host-only torch)."""
    folder = os.path.join(os.path.dirname(torch.__file__), "lib")
    libraries = [ctypes.CDLL(path) for pattern in ("libtorch_cpu.*", "libtorch_python.*", "libtorch_cuda.*")
                 for path in sorted(glob.glob(os.path.join(folder, pattern)))[:1]]
    found = {}
    for field, (symbol, _) in _SHIM.items():
        for name in _WRAP_SYMBOLS if field == "wrap" else (symbol,):
            address = next((ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                            for lib in libraries if hasattr(lib, name)), None)
            if address:
                found[field] = address
                break
    return found


def _layout_holds(torch, api: Api) -> bool:
    """Whether each probe tensor's object holds its at::Tensor right after the header: the word
    there is its TensorImpl's address, and the shim reads its pointer and shape through it."""
    base = torch.empty((4, 6))  # made, not computed: a host kernel's first run costs milliseconds
    for probe in (base, base[1:, ::2], torch.empty(0, dtype=torch.int8)):
        if type(probe).__basicsize__ < HEADER + 8 or \
                ctypes.c_void_p.from_address(id(probe) + HEADER).value != probe._cdata or \
                ctypes.c_void_p.from_address(id(probe) + TYPE_OFFSET).value != id(type(probe)):
            return False
        if _read(api.get_data_ptr, ctypes.c_void_p, probe) != (probe.data_ptr() or None) or \
                _read(api.get_dim, ctypes.c_int64, probe) != probe.dim():
            return False
    return True


@functools.cache
def torch_api() -> TorchApi | None:
    """The shim of the torch this process imported, where native calls can use it: CPython
    builtins are made, every function is found (all but the CUDA stream's in a host-only torch:
    `api.stream` is then None) and the tensor layout is the expected one. Else None, and prepared
    calls stay in Python."""
    torch = sys.modules.get("torch")
    if torch is None or not host_jit.builtins_available() or not host_jit.python_api_available():
        return None
    try:
        found = _library_functions(torch)
        if set(_SHIM) - set(found) - {"stream"}:
            return None
        api = Api(**found)
        return TorchApi(api, torch) if _layout_holds(torch, api) else None
    except (OSError, AttributeError, ValueError):  # another build of torch: stay in Python
        return None


def describe_tensor(position: int, tensor: object) -> tuple:
    """(position, Python type, sizes, strides, dtype, device) of a tensor input: what the native
    call checks, read in Python (cheaply, at a fusion's first call; the shim's codes for them are
    read when the native call is made)."""
    return position, type(tensor), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, tensor.device


@dataclass(frozen=True)
class Conditions:
    """When a native call runs, and what takes over where it does not."""

    settings: object  # braze's configuration (config.current) the call was prepared under
    open_recordings: int  # the address of the int64 counting open bz.record() scopes
    context_getter: int  # cuCtxGetCurrent's address (or a function of its C signature)
    context: int  # the CUDA context the call's kernels were loaded in
    fallback: Callable[..., object]  # takes the call's own arguments where it declines
    failed: Callable[[int], object]  # takes the launch loop's code where a launch failed (and raises)


class TorchCall:
    """The builtin running one prepared call, `call(inputs)` (valid while this object, which
    holds its spec and arrays and which the builtin keeps alive, lives)."""

    def __init__(self, api: TorchApi, arity: int, tensors: Sequence[tuple], outputs: Sequence[tuple],
                 returned: Sequence[int], launches: NativeLaunches, block_address: int,
                 slots: Sequence[tuple[int, int]], device_index: int, conditions: Conditions) -> None:
        """`tensors`: `describe_tensor` of each tensor input; `outputs`: (sizes, strides in
        elements, torch dtype, torch device) of each output; `returned`: the output each result
        is; `launches`: the prepared call's launch tables (held here); `slots`: (block slot,
        source), the source numbering the tensors' pointers first, then the outputs'."""
        self.arrays: list[ctypes.Array] = []
        self.api, self.conditions, self.launches = api, conditions, launches
        checks = [TensorCheck(position, id(cls), len(sizes), self._keep(sizes), self._keep(strides),
                              *api.codes(dtype, device))
                  for position, cls, sizes, strides, dtype, device in tensors]
        self.checks = (TensorCheck * max(len(checks), 1))(*checks)
        made = [OutputAllocation(len(sizes), self._keep(sizes), self._keep(strides), *api.codes(dtype, device))
                for sizes, strides, dtype, device in outputs]
        self.outputs = (OutputAllocation * max(len(made), 1))(*made)
        self.spec = CallSpec(
            ctypes.addressof(api.api), id(tuple), id(list), arity, ctypes.addressof(self.checks), len(checks),
            ctypes.addressof(self.outputs), len(made), self._keep(returned), len(returned),
            ctypes.addressof(launches.tables), launches.count, block_address, self._keep([slot for slot, _ in slots]),
            self._keep([source for _, source in slots]), len(slots), device_index,
            id(vars(config)), id(_CONFIG_KEY), id(conditions.settings), conditions.open_recordings,
            conditions.context_getter, conditions.context, id(conditions.fallback), id(conditions.failed))
        self.call = host_jit.new_builtin(host_jit.fastcall_method(NAME, llvm_source, keywords=True),
                                    ctypes.addressof(self.spec), self)

    def _keep(self, values: Sequence[int]) -> int:
        array = (ctypes.c_int64 * max(len(values), 1))(*values)
        self.arrays.append(array)
        return ctypes.addressof(array)


_CONFIG_KEY = sys.intern("current")  # the name of braze's configuration in its module
