"""`@bz.kernel`: loop kernels written in Python, compiled once per signature.

    @bz.kernel
    def step(x: bz.Array[bz.float32, 1], v: bz.Array[bz.float32, 1], dt: bz.float32):
        for i in range(x.shape[0]):
            x[i] += v[i] * dt

A signature is each array's dtype, rank and whether its innermost stride is 1 (that makes loops
vectorize), plus whether any two arrays overlap in memory: the task-fusion analysis treats
parameters as distinct resources, so overlapping arguments get a kernel compiled without fusion.

NumPy (and other host) arrays run on the CPU backend; GPU arrays (torch, CuPy, DeviceArray) run
on their GPU, through `kernel_gpu` (the device is then part of the signature). A call whose
arguments are described as an earlier call's were takes that call's prepared call from the
kernel's call cache (`KernelFunction.calls`, runtime/fast_call.py), on either.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import reprlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from braze import config, engine
from braze import dtypes as dt
from braze.dtypes import DType
from braze.errors import Error, InputError, KernelTypeError, a_or_an
from braze.frontend import kernel_gpu
from braze.frontend.kernel_ast import translate_kernel
from braze.frontend.kernel_lang import ArrayType, _ArrayTypes
from braze.frontend.kernel_scope import ArrayHandle, Source, VectorValue
from braze.frontend.kernel_vectors import VectorType
from braze.kir import kernel_text
from braze.kir import nodes as k
from braze.passes.fuse_tasks import Decision
from braze.passes.simplify import map_children
from braze.record import note_entry
from braze.runtime.arrays import OverlapCheck, as_host_array, writable
from braze.runtime.device_arrays import is_device_array
from braze.runtime.fast_call import FastCalls

_NUMPY_TO_DTYPE = {d.numpy: d for d in dt.ALL_DTYPES}
_INT_RANGES = {d.name: (int(np.iinfo(d.numpy).min), int(np.iinfo(d.numpy).max)) for d in dt.INT_DTYPES}


def _param_spec(name: str, annotation: object, fn: Callable) -> ArrayType | DType | VectorType:
    if isinstance(annotation, _ArrayTypes):
        return ArrayType()
    if isinstance(annotation, (ArrayType, VectorType)):
        return annotation
    try:
        return dt.as_dtype(annotation)
    except Error:
        pass
    got = "no annotation" if annotation is inspect.Parameter.empty else repr(annotation)
    raise KernelTypeError(f"{_where(fn)}: kernel {fn.__name__}: parameter '{name}': expected an annotation "
                          f"bz.Array[dtype, ndim], a braze dtype, int or float, got {got}")


def _zero_dim_array(value: object) -> bool:
    """A 0-d NumPy array of numbers or a 0-d torch tensor (not a NumPy scalar, which is a number already)."""
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and value.dtype.kind in "biuf"
    return type(value).__module__.startswith("torch") and getattr(value, "ndim", None) == 0


def _where(fn: Callable) -> str:
    return f"{inspect.getsourcefile(fn) or fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"


def _annotations(fn: Callable) -> dict[str, object]:
    """The parameters' annotations, evaluated (strings under `from __future__ import annotations`)."""
    try:
        return inspect.get_annotations(fn, eval_str=True)
    except NameError as error:
        raise KernelTypeError(f"{_where(fn)}: kernel {fn.__name__}: an annotation names something that is not "
                              f"defined where the module's names are ({error}); under `from __future__ import "
                              "annotations` annotations are evaluated in the module's globals, so a name local "
                              "to the enclosing function cannot be seen: define it at module level") from None


class KernelFunction:
    """A `@bz.kernel`. Calling it binds the arguments, finds (or compiles) the signature's kernel and runs it."""

    def __init__(self, fn: Callable, debug: bool = False, fuse_tasks: bool = True) -> None:
        functools.update_wrapper(self, fn)
        self.fn, self.debug, self.fuse = fn, debug, fuse_tasks
        self.label = f"{_where(fn)}: kernel {fn.__name__}"  # how an error names the kernel: file, line, name
        annotations = _annotations(fn)
        names = list(inspect.signature(fn).parameters)
        declared = [(n, _param_spec(n, annotations.get(n, inspect.Parameter.empty), fn)) for n in names]
        self.arity = len(declared)
        # A vector or matrix parameter is one scalar parameter per component (`specs`); a call passes
        # its components in their place (`_flat_arguments`), and the kernel sees the vector.
        self.vector_params = [VectorParam(position, n, spec, component_names(n, spec))
                              for position, (n, spec) in enumerate(declared) if isinstance(spec, VectorType)]
        self.specs = [(c, spec.dtype if isinstance(spec, VectorType) else spec) for n, spec in declared
                      for c in component_names(n, spec)] if self.vector_params else declared
        _check_component_names(fn, [n for n, _ in self.specs])
        self.array_positions = [i for i, (_, s) in enumerate(self.specs) if isinstance(s, ArrayType)]
        self.scalar_specs = [(i, n, s) for i, (n, s) in enumerate(self.specs) if not isinstance(s, ArrayType)]
        # Prepared calls by argument description, on the host and on GPUs (runtime/fast_call.py).
        self.calls = FastCalls(len(self.specs), frozenset(i for i, _, _ in self.scalar_specs), any_scalar=True)
        self.entries: dict[tuple, engine.KernelEntry] = {}
        self.last_entry: engine.KernelEntry | None = None
        self._array_index = {self.specs[p][0]: n for n, p in enumerate(self.array_positions)}
        self._bound_extents: list[tuple[str, int]] | None = None  # (array, axis) read by task bounds
        self._warned: set[str] = set()  # warnings its translations gave: each is said once per kernel

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != self.arity:  # keywords, or parameters left to their defaults
            args = self._positional(args, kwargs)
        if len(args) != self.arity:
            raise InputError(f"{self.label}: expected {self.arity} arguments, got {len(args)}")
        if self.vector_params:
            args = self._flat_arguments(args)
        if self.calls.run(args) is not None:  # arguments of a description seen before, still as prepared
            return
        numbers = self._zero_dim_as_numbers(args)
        if numbers is not args:
            args = numbers
            if self.calls.run(args) is not None:
                return
        if self.array_positions and _on_gpu(self, args):
            kernel_gpu.bind_and_run(self, args)
            return
        self._bind_and_run(args)

    def _bind_and_run(self, args: Sequence[Any]) -> None:
        """A host call the call cache did not take: check the arguments, compile if needed, and run,
        through a prepared call made for them unless the cache holds one for their kernel already
        (it refused these arguments for a reason of its own: then this call runs outside the cache)."""
        arrays, scalars, key = self._bind(args)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = self._compile(key)
        self.last_entry = entry
        self.check_writable(entry, arrays)
        filed = self.calls.filed(args)
        # Within one description only the arrays' overlap picks the kernel: the filed call's or its pair's.
        known = filed if filed is None or filed.executor is entry.launcher else filed.other
        if known is None and _preparable(args, arrays, self.array_positions):
            note_entry(f"prepared call {self.__name__}")
            overlapping = key[len(arrays)]  # (the key: each array's layout, then whether they overlap)
            prepared = entry.launcher.prepare(arrays, self.array_positions, [i for i, _, _ in self.scalar_specs],
                                              entry.written, overlapping)
            if filed is None:
                self.calls.learn(args, prepared)
            else:
                filed.pair(prepared)
            if prepared.run(args) is not None:
                return
        entry.launcher.run(arrays, scalars, args)

    def check_writable(self, entry: engine.KernelEntry, arrays: Sequence[Any]) -> None:
        """An InputError where the kernel writes an array marked read-only (a NumPy flag, or the
        read-only bit of a `__cuda_array_interface__`)."""
        for position in entry.written:
            if not arrays[position].flags.writeable:
                raise InputError(f"{self.label}: argument '{self.specs[self.array_positions[position]][0]}'"
                                 ": the kernel writes it, but the array is read-only")

    # --- binding ----------------------------------------------------------------------------------
    def _flat_arguments(self, args: Sequence[Any]) -> list:
        """The arguments with each vector or matrix argument replaced by its components."""
        flat = list(args)
        for vector in reversed(self.vector_params):  # from the last: earlier positions stay put
            flat[vector.position:vector.position + 1] = vector.components(args[vector.position], self.label)
        return flat

    def _positional(self, args: tuple, kwargs: dict) -> tuple:
        try:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
        except TypeError as error:
            raise InputError(f"{self.label}: {error}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _bind(self, args: Sequence[Any]) -> tuple[list[np.ndarray], list, tuple]:
        arrays, scalars, key = [], [], []
        for (name, spec), value in zip(self.specs, args):
            if isinstance(spec, ArrayType):
                array = self._array(name, spec, value)
                arrays.append(array)
                key.append((array.dtype, array.ndim, array.ndim > 0 and array.strides[-1] == array.itemsize))
            else:
                scalars.append(self._scalar(name, spec, value))
        key.append(_overlapping(arrays))
        key.append(self.extent_classes(tuple(key), [a.shape for a in arrays]))
        key.extend(self.knob_key())
        return arrays, scalars, tuple(key)

    def extent_classes(self, key: tuple, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
        """For each array extent the tasks' bounds read, the position of the first one equal to it at
        this call: loops over `range(x.shape[0])` and `range(v.shape[0])` get the same bounds, and may
        fuse, when the two extents are equal (a call where they differ is another signature)."""
        if self._bound_extents is None:  # the first call: the bounds are known once translated
            self.signature_ir((*key, (), *self.knob_key()))
        values = [shapes[self._array_index[name]][axis] for name, axis in self._bound_extents]
        return tuple(values.index(v) for v in values)

    @staticmethod
    def knob_key() -> tuple:
        """The fusion knobs first, then every knob that changes the code (fast_math, ...): part of every
        signature, so a knob changed between calls (config.scope) takes effect."""
        knobs = config.current
        return ((knobs.fuse_tasks, knobs.fuse_tasks_diag, *config.code_knobs()),)

    def _array(self, name: str, spec: ArrayType, value: Any) -> np.ndarray:
        where = f"{self.label}: argument '{name}'"
        array = value if type(value) is np.ndarray else as_host_array(value, where)[0]
        self.check_layout(where, spec, array.dtype, array.shape, array.strides, array.itemsize)
        return array

    @staticmethod
    def check_layout(where: str, spec: ArrayType, dtype: np.dtype, shape: tuple[int, ...], strides: tuple[int, ...],
                     itemsize: int) -> None:
        """An array argument against its annotation: dtype, rank (and the trailing extents of an array of
        vectors), and strides of whole elements."""
        braze_dtype, ndim = _NUMPY_TO_DTYPE.get(dtype), len(shape)
        element = spec.element
        if element is not None:
            _check_vector_layout(where, spec, braze_dtype, dtype, shape)
        elif braze_dtype is None or spec.dtype is not None and braze_dtype != spec.dtype:
            expected = spec.dtype.name if spec.dtype else "a braze dtype"
            raise InputError(f"{where}: expected {expected}, got {dt.numpy_dtype_text(dtype)}")
        elif spec.ndim is not None and ndim != spec.ndim:
            raise InputError(f"{where}: expected {spec.ndim} dimension(s), got {ndim}")
        if any(s % itemsize for s in strides):
            raise InputError(f"{where}: strides {strides} are not whole elements")

    def _zero_dim_as_numbers(self, args: Sequence[Any]) -> Sequence[Any]:
        """`args` with each 0-d array given for a scalar parameter as its number: a time step computed by
        NumPy, by torch (`v.abs().max()`) or returned by a @bz.jit reduction is one (it was refused as an
        ndarray or a Tensor). `args` itself where there is none."""
        found = [i for i, _, _ in self.scalar_specs if _zero_dim_array(args[i])]
        if not found:
            return args
        numbers = list(args)
        for i in found:
            numbers[i] = args[i].item()
        return numbers

    def _scalar(self, name: str, dtype: DType, value: Any):
        if _zero_dim_array(value):  # (_zero_dim_as_numbers)
            value = value.item()
        allowed = (bool, np.bool_) if dtype.is_bool else (int, bool, np.integer, np.bool_) if dtype.is_integer \
            else (int, float, np.integer, np.floating)
        if not isinstance(value, allowed):
            raise InputError(f"{self.label}: argument '{name}': expected {a_or_an(dtype.name)} scalar, "
                             f"got {type(value).__name__}")
        if dtype.is_integer and not _INT_RANGES[dtype.name][0] <= value <= _INT_RANGES[dtype.name][1]:
            raise InputError(f"{self.label}: argument '{name}': {value} does not fit in {dtype.name}")
        return value

    # --- compiling --------------------------------------------------------------------------------
    def _compile(self, key: tuple) -> engine.KernelEntry:
        kernel, arrays, scalars, fuse, _ = self.signature_ir(key)
        return engine.loop_kernel_entry(kernel, arrays, scalars, fuse=fuse)

    def signature_ir(self, key: tuple) -> tuple[k.Kernel, list[k.ArrayParam], list[k.ScalarParam], bool, bool]:
        """The Kernel IR of a signature (before task fusion), its array and scalar parameters, whether
        to fuse its tasks, and whether its arrays overlap."""
        arrays: list[k.ArrayParam] = []
        scalars: list[k.ScalarParam] = []
        names: dict[str, object] = {}
        parts = iter(key)
        for name, spec in self.specs:
            if isinstance(spec, ArrayType):
                numpy_dtype, ndim, unit_inner = next(parts)
                strides = tuple([None] * (ndim - 1) + [1 if unit_inner else None]) if ndim else ()
                param = k.ArrayParam(name, _NUMPY_TO_DTYPE[numpy_dtype], ndim, strides)
                arrays.append(param)
                names[name] = ArrayHandle(param, spec.element)
            else:
                param = k.ScalarParam(name, spec)
                scalars.append(param)
                names[name] = k.ScalarRef(param)
        for vector in self.vector_params:
            names[vector.name] = VectorValue(vector.type, tuple(names.pop(c) for c in vector.names))
        overlapping, classes = next(parts), next(parts)
        fuse = self.fuse and not overlapping and next(parts)[0]
        source = Source.of(self.fn)
        tasks = translate_kernel(self.fn.__name__, source, names, self.debug or config.current.debug,
                                 self._warned, overlapping)
        if self._bound_extents is None:
            self._bound_extents = list(dict.fromkeys(x for t in tasks for bound in (t.begin, t.end)
                                                     for x in _extents_read(bound)))
        tasks = _with_equal_extents(tasks, self._bound_extents, classes, names)
        params = (*arrays, *scalars)
        kernel = k.Kernel(self.fn.__name__, params, tuple(tasks), source=f"{source.file}:{source.first_line}")
        if k.assert_messages(kernel):
            kernel = k.Kernel(kernel.name, (*params, k.ArrayParam(k.ASSERT_STATUS, dt.int64, 1, (1,))),
                              kernel.tasks, kernel.source)
        return kernel, arrays, scalars, fuse, overlapping

    # --- introspection --------------------------------------------------------------------------
    def decisions(self) -> list[Decision]:
        """Task fusion's decisions for the signature of the last call."""
        return self.last_entry.decisions if self.last_entry else []

    def cuda_source(self, *args: Any, **kwargs: Any) -> str:
        """The CUDA C++ braze generates for arguments like `args` (host arrays will do: the source
        depends on dtypes, ranks and layouts only). Needs no GPU. A `str` of the kernels, one
        `__global__` per task after task fusion; `.text` adds the prelude (what NVRTC compiles) and
        `.functions` names each task's function."""
        if kwargs or len(args) != self.arity:
            args = self._positional(args, kwargs)
        if self.vector_params:
            args = self._flat_arguments(args)
        _, _, key = self._bind(args)
        kernel, _, _, fuse, overlapping = self.signature_ir(key)
        return engine.loop_kernel_cuda_source(kernel, fuse=fuse, restrict=not overlapping)

    def kernel_ir(self) -> str:
        """The Kernel IR (after task fusion) of the signature of the last call."""
        return kernel_text(self.last_entry.launcher.kernel) if self.last_entry else ""


@dataclass(frozen=True)
class VectorParam:
    """A `bz.vec3` (or other vector or matrix) parameter: its position among the declared
    parameters, and the scalar parameters that hold its components."""

    position: int
    name: str
    type: VectorType
    names: tuple[str, ...]

    def components(self, value: Any, kernel_label: str) -> list:
        """The components of an argument: a tuple or list of numbers (nested by rows for a matrix), a
        NumPy array of the type's shape, or the type's own value (`bz.vec3(0, -9.81, 0)`)."""
        try:
            array = np.asarray(value) if not isinstance(value, (str, bytes)) else None
        except (TypeError, ValueError, RuntimeError):  # ragged nesting, a GPU tensor
            array = None
        where = f"{kernel_label}: argument '{self.name}'"
        if array is None or array.shape != self.type.shape:
            got = f"shape {array.shape}" if array is not None else type(value).__name__
            raise InputError(f"{where}: expected {a_or_an(repr(self.type))}: {self.type.size} numbers as a tuple, "
                             f"a NumPy array of shape {self.type.shape} or {self.type!r}(...), got {got}")
        if array.dtype.kind not in "biuf":
            raise InputError(f"{where}: expected real numbers, got {reprlib.repr(value)} (dtype {array.dtype})")
        if not self.type.dtype.is_floating:  # an integer vector's components: Python ints, checked as int scalars
            return array.reshape(-1).tolist()
        return array.astype(np.float64).reshape(-1).tolist()


def component_names(name: str, spec: object) -> tuple[str, ...]:
    """The scalar parameters of a parameter: `g_x, g_y, g_z` for a vec3 `g`, `m_00 ... m_22` for a
    mat33 `m`, and the name itself for any other."""
    if not isinstance(spec, VectorType):
        return (name,)
    if spec.is_matrix:
        return tuple(f"{name}_{i}{j}" for i in range(spec.shape[0]) for j in range(spec.shape[1]))
    return tuple(f"{name}_{c}" for c in "xyzw"[:spec.size])


def _check_component_names(fn: Callable, names: list[str]) -> None:
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise KernelTypeError(f"{_where(fn)}: kernel {fn.__name__}: parameter '{repeated[0]}' is also the name of a "
                              "component of a vector or matrix parameter (g_x for a vec3 g): rename it")


def _check_vector_layout(where: str, spec: ArrayType, braze_dtype: DType | None, dtype: np.dtype,
                         shape: tuple[int, ...]) -> None:
    """An array of vectors: `element.dtype`, the element's extents last, and the annotated rank before them."""
    element = spec.element
    rank = len(element.shape)
    expected = f"{spec.ndim}-d " if spec.ndim is not None else ""
    what = (f"expected a {expected}array of {element!r}, that is {element.dtype.name} values with last "
            f"extent(s) {element.shape}")
    if braze_dtype != element.dtype:
        raise InputError(f"{where}: {what}; got dtype {dtype}")
    if len(shape) < rank or tuple(shape[len(shape) - rank:]) != element.shape or \
            spec.ndim is not None and len(shape) != spec.ndim + rank:
        raise InputError(f"{where}: {what}; got shape {tuple(shape)}")


def _extents_read(e: k.Expr) -> list[tuple[str, int]]:
    """(array, axis) of every extent an expression reads."""
    found: list[tuple[str, int]] = []

    def visit(node: k.Expr) -> k.Expr:
        if isinstance(node, k.ArrayExtent):
            found.append((node.param.name, node.axis))
        return map_children(node, visit)

    visit(e)
    return found


def _with_equal_extents(tasks: list[k.Task], extents: list[tuple[str, int]], classes: tuple[int, ...],
                        names: dict[str, object]) -> list[k.Task]:
    """The tasks with each bound extent replaced by the first extent equal to it at the call."""
    if not classes:
        return tasks
    same = {extents[n]: extents[first] for n, first in enumerate(classes) if first != n}
    if not same:
        return tasks

    memo: dict[k.Expr, k.Expr] = {}

    def rewrite(e: k.Expr) -> k.Expr:
        if e not in memo:
            if isinstance(e, k.ArrayExtent) and (e.param.name, e.axis) in same:
                name, axis = same[(e.param.name, e.axis)]
                memo[e] = k.ArrayExtent(names[name].param, axis)
            else:
                memo[e] = map_children(e, rewrite)
        return memo[e]

    # The bodies too: the coordinates of a `bz.ndrange` over `q.shape` are split from the flat index by
    # q's extents, and a loop over p's equal ones must index alike for task fusion to see the same cell.
    return [dataclasses.replace(t, begin=rewrite(t.begin), end=rewrite(t.end),
                                body=tuple(_rewritten_statement(s, rewrite) for s in t.body)) for t in tasks]


def _rewritten_statement(s: k.Stmt, rewrite: Callable[[k.Expr], k.Expr]) -> k.Stmt:
    """`s` with `rewrite` applied to every expression it holds, in nested bodies too."""
    def part(value: object) -> object:
        if isinstance(value, k.Expr):
            return rewrite(value)
        if isinstance(value, k.Stmt):
            return _rewritten_statement(value, rewrite)
        if isinstance(value, tuple):
            return tuple(part(v) for v in value)
        return value

    changes = {f.name: part(getattr(s, f.name)) for f in dataclasses.fields(s)}
    return dataclasses.replace(s, **changes)


def _preparable(args: Sequence[Any], arrays: Sequence[np.ndarray], positions: Sequence[int]) -> bool:
    """Whether a host call can have a prepared call: every array argument a NumPy array itself (not
    a view braze made of another library's array, which the call cache would read again)."""
    return all(type(array) is np.ndarray and args[p] is array for p, array in zip(positions, arrays))


def _on_gpu(fn: KernelFunction, args: Sequence[Any]) -> bool:
    """Whether any array argument is a GPU array (then all must be, on one GPU)."""
    return any(type(args[p]) is not np.ndarray and is_device_array(args[p]) for p in fn.array_positions)


def _overlapping(arrays: list[np.ndarray]) -> bool:
    """Whether two arguments may share memory, or a writable one overlaps itself (arrays owning their
    data never do, unless passed twice)."""
    if all(a.base is None for a in arrays):
        return len({id(a) for a in arrays}) < len(arrays)
    return OverlapCheck(arrays, writable)([a.__array_interface__["data"][0] for a in arrays])


def kernel(fn: Callable | None = None, *, debug: bool = False, fuse_tasks: bool = True):
    """Compiles a Python function of arrays and scalars into a loop kernel (docs/index.md, "Loop kernels"), run on
    the CPU for host arrays and on the GPU for GPU arrays.

    `debug=True` (or `BRAZE_DEBUG=1` for every kernel) checks every index against the array's
    extent; `fuse_tasks=False` keeps each top-level loop its own launch.

    Each top-level `for` over `range` or `bz.ndrange` runs in parallel; `+=` and `-=` on an element
    that is not provably the thread's own are atomic, as are all updates of an array the loop
    updates at two places threads can share (`f[i] += s` beside `f[i + 1] -= s`). Integer `//` and
    `%` by zero give 0, as NumPy does for integer arrays (without its warning).
    """
    if fn is None:
        return lambda f: KernelFunction(f, debug=debug, fuse_tasks=fuse_tasks)
    return KernelFunction(fn, debug=debug, fuse_tasks=fuse_tasks)
