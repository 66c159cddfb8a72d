"""`@bz.jit`: traces a function of tensors into a Fusion, once per input signature.

A Python `float` or `int` argument is a runtime value: the trace takes it as a weak scalar input,
so one compiled fusion serves every learning rate or time step. `static_argnames` /
`static_argnums` bake chosen arguments in as constants instead (one trace per value), as in JAX;
`bool`, `None`, string, dtype and tuple arguments are always baked, since they are options that may
steer the function's control flow (`reduction="mean"`, `weight=None`, `axes=(1, 2)`).

Extents are symbolic, so one trace serves every size, until the function uses one as a Python number
(`range(n)`, `np.arange(n)`, `torch.ones((n, n))`, `if n > 128`): it is then the call's size, and the
trace serves the calls whose extents so used have the same values, as torch.compile specializes a
size its code reads (`Trace.guard`). Arrays the function makes or reads from outside (a mask built
with torch, a global table) are taken in as inputs of the fusion, passed on every call after the
arguments (`Trace.captured`); an array is held, not copied, so writes into it show in later calls
(what NumPy computed from it while tracing, `np.exp(table)` outside braze's ops, stays as computed).
"""

from __future__ import annotations

import functools
import inspect
import operator
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from braze import dtypes as dt
from braze.errors import Error, FusionDefinitionError, InputError, UnsupportedError
from braze.frontend.fusion import Fusion
from braze.frontend.jit_numbers import number_check
from braze.frontend.jit_trees import flatten, is_tree, unflatten
from braze.ir.fusion import active_fusion
from braze.ir.scalar import Scalar, concretizing
from braze.ir.tensor import TensorView
from braze.ops.creation import full
from braze.ops.elementwise import elementwise
from braze.runtime.arrays import as_host_array, is_torch_tensor
from braze.runtime.device_arrays import as_device_view, is_device_array
from braze.runtime.fast_call import MAX_DESCRIPTIONS, Describer, FastCalls
from braze.runtime.inputs import stride_order_of


class Trace(NamedTuple):
    """A traced fusion and what a call needs besides it."""

    fusion: Fusion
    rebuild: Callable[[list], object]  # the function's result (a tensor, a tuple, a dict) from the outputs
    check_numbers: Callable[[Sequence[object]], None] | None  # runtime ints the trace narrows (jit_numbers.py)
    captured: tuple  # arrays the function made or read, the fusion's inputs after the arguments
    guard: tuple[tuple[int, int, int], ...]  # (argument, axis, extent): sizes the function used as numbers

    def serves(self, args: Sequence[object]) -> bool:
        return all(args[position].shape[axis] == extent for position, axis, extent in self.guard)


MAX_TRACES = 64  # fusions kept per jit function, one per signature (and per size its code used as a number)
# The dtype that carries a runtime Python number exactly; it stays weak in type promotion.
_RUNTIME_SCALAR_DTYPES = {int: dt.int64, float: dt.float64}


def _is_default_order(order: tuple[int, ...]) -> bool:
    return order == tuple(reversed(range(len(order))))


def _tensor_signature(array: np.ndarray, kind: str) -> tuple:
    """Rank, dtype, which extents are 1 (they broadcast), stride order and array kind."""
    order = stride_order_of(array)
    return ("tensor", dt.from_numpy(array.dtype), tuple(s == 1 for s in array.shape),
            None if _is_default_order(order) else order, kind)


def _python_value(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


def _static_signature(value: object, name: str) -> tuple:
    """A baked argument keys its trace by value. Floats key by their bits, so -0.0 and 0.0 get traces
    of their own and a NaN finds its trace again."""
    value = _python_value(value)
    identity = value.hex() if isinstance(value, float) else value
    try:
        hash(identity)
    except TypeError:
        raise InputError(f"argument {name!r}: a static argument must be hashable, "
                         f"got {type(value).__name__}") from None
    return ("const", type(value), identity)


def _is_option(value: object) -> bool:
    """Arguments that can only be options, never data: `reduction="mean"`, `weight=None`,
    `dtype=bz.float32`, `axes=(1, 2)`. They are baked in as bools are, whatever static_argnames says."""
    if value is None or isinstance(value, (bool, np.bool_, str, dt.DType, np.dtype, slice)):
        return True
    if isinstance(value, tuple):
        return all(_is_option(v) or type(v) in (int, float) for v in value)
    return False


def _arg_signature(value: object, name: str, static: bool) -> tuple:
    if static or _is_option(value):
        return _static_signature(value, name)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return ("scalar", type(_python_value(value)))  # a runtime value: one trace for every value
    where = f"argument {name!r}"
    if is_device_array(value):
        array = as_device_view(value, where)
        kind = array.kind
    else:
        array, kind = as_host_array(value, where)
    try:
        return _tensor_signature(array, kind)
    except Error as error:
        raise type(error)(f"{where}: {error}") from None


def _static_positions(fn: Callable, names: list[str], argnums: Iterable[int],
                      argnames: Iterable[str]) -> frozenset[int]:
    """The parameter positions `static_argnums` and `static_argnames` name, checked against `fn`."""
    positions = set()
    for number in argnums:
        if not isinstance(number, int) or not -len(names) <= number < len(names):
            raise FusionDefinitionError(f"jit: static_argnums: expected positions of {fn.__name__}'s "
                                        f"{len(names)} parameters, got {number!r}")
        positions.add(number % len(names))
    for name in argnames:
        if name not in names:
            raise FusionDefinitionError(f"jit: static_argnames: expected parameters of {fn.__name__} "
                                        f"({', '.join(names)}), got {name!r}")
        positions.add(names.index(name))
    return frozenset(positions)


def _check_named_parameters(fn: Callable, signature: inspect.Signature) -> None:
    """A trace is keyed by each named parameter's argument: `*args` and `**kwargs` have no fixed list."""
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            stars = "*" if parameter.kind is parameter.VAR_POSITIONAL else "**"
            raise FusionDefinitionError(
                f"jit: {getattr(fn, '__name__', 'fn')}: expected named parameters only, got {stars}{parameter.name}; "
                f"write a function that names each input (def f(x, y): ...)")


def _scalar_positions(args: tuple) -> frozenset[int]:
    return frozenset(i for i, a in enumerate(args) if type(a) in _RUNTIME_SCALAR_DTYPES)


class JitFunction:
    """A traced function. Calling it looks up (or traces) the fusion for the arguments' signature."""

    def __init__(self, fn: Callable, backend: str | None = None, static_argnums: Iterable[int] = (),
                 static_argnames: Iterable[str] = ()) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.backend = backend
        self.signature = inspect.signature(fn)
        _check_named_parameters(fn, self.signature)
        self.names = list(self.signature.parameters)
        self.static = _static_positions(fn, self.names, static_argnums, static_argnames)
        self.fusions: OrderedDict[tuple, list[Trace]] = OrderedDict()  # the last MAX_TRACES used
        # Calls by their arguments' full description (dtype, shape, strides and device of each array,
        # the type of each number), so a repeated call skips binding and signatures: the fusion's own
        # cached call does the rest. One describer per set of positions that hold numbers, found by the
        # arguments' types (a tuple of types is quicker to make than the set of positions).
        self.describers: dict[tuple[type, ...], Callable[[Sequence[object]], tuple | None]] = {}
        # Per description, its trace and the fusion's cached calls where they file calls under that
        # same description (they are then asked with it, not made to describe the arguments again).
        self.described: dict[tuple, tuple[Trace, FastCalls | None]] = {}
        # Threads calling with new signatures or sizes change both tables at once (one drops the traces
        # another files calls under); a cached call only reads `described`, and takes no lock.
        self._tables_lock = threading.RLock()
        # Per structure of arguments that hold arrays in containers, the jit function of their leaves.
        self.trees: dict[tuple, JitFunction] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Positional arguments only, the parameters after them left to their defaults (baked in): one
        # description of the arguments given finds the trace and its cached call.
        key = self._describe(args) if not kwargs and not self.static and len(args) <= len(self.names) else None
        known = self.described.get(key) if key is not None else None
        if known is not None:  # the fast path: arguments described before, in full
            trace, fast = known
            if trace.check_numbers is not None:
                trace.check_numbers(args)
            outputs = fast.find(args, key) if fast is not None and fast.native is None else None
            if outputs is None:  # without keywords where none are needed: the native cached call takes none
                inputs = [*args, *trace.captured] if trace.captured else args
                outputs = trace.fusion.execute(inputs, **({} if self.backend is None else {"backend": self.backend}))
            return trace.rebuild(outputs)
        given = len(args)
        args, defaulted = self._bind(args, kwargs)
        baked = self.static | defaulted
        if any(i not in baked and is_tree(a) for i, a in enumerate(args)):
            return self._call_with_leaves(args, baked)
        key = tuple(_arg_signature(a, n, i in baked) for i, (a, n) in enumerate(zip(args, self.names)))
        trace = self._traced(key, args)
        if trace.check_numbers is not None:
            trace.check_numbers(args)
        inputs = [_python_value(a) if sig[0] == "scalar" else a for a, sig in zip(args, key) if sig[0] != "const"]
        outputs = trace.fusion.execute([*inputs, *trace.captured], backend=self.backend)
        if not kwargs and not self.static and len(inputs) == given and all(sig[0] != "const" for sig in key[:given]):
            self._remember(args[:given], trace)  # the fusion's inputs are the arguments given, in order
        return trace.rebuild(outputs)

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        """`@bz.jit` on a method: `model.forward(x)` passes the instance as the first argument, which
        must be baked in (`static_argnames="self"`): it is no array, and the method reads its attributes
        while tracing."""
        return self if instance is None else functools.partial(self._call_method, instance)

    def _call_method(self, instance: object, *args: Any, **kwargs: Any) -> Any:
        if 0 not in self.static:
            raise InputError(
                f"{self.fn.__name__}: argument {self.names[0]!r}: expected an array, got the method's instance "
                f"({type(instance).__name__}); bz.jit(static_argnames={self.names[0]!r}) bakes it in, with the "
                "attributes the method reads (one trace per instance)")
        return self(instance, *args, **kwargs)

    def _bind(self, args: tuple, kwargs: dict) -> tuple[tuple, frozenset[int]]:
        """Every parameter's value, in order, defaults applied, and the positions of the numbers left at
        their defaults. Those are baked in, as JAX does: a default is a constant of the function (the
        `groups=2` of a GroupNorm, used as a shape), not a value the caller varies."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            given = len(args) + len(kwargs)
            raise InputError(f"{self.fn.__name__}: expected {len(self.names)} arguments, got {given}") from None
        given = set(bound.arguments)
        bound.apply_defaults()
        defaulted = frozenset(i for i, name in enumerate(self.names)
                              if name not in given and isinstance(bound.arguments[name], (int, float, np.number)))
        return tuple(bound.arguments[name] for name in self.names), defaulted

    def _call_with_leaves(self, args: tuple, baked: frozenset[int]) -> Any:
        """A call whose arguments hold arrays in lists, tuples or dicts (braze/frontend/jit_trees.py): a
        jit function of their leaves, one per structure, runs it."""
        structures, leaves, names, static = [], [], [], []
        for i, (value, name) in enumerate(zip(args, self.names)):
            if i in baked:
                static.append(len(leaves))
                leaves.append(value)
                names.append(name)
                structures.append(None)
            else:
                structures.append(flatten(value, name, leaves, names))
        key = tuple(structures), tuple(static)
        with self._tables_lock:
            inner = self.trees.get(key)
            if inner is None:
                if len(self.trees) >= MAX_TRACES:
                    self.trees.clear()
                inner = self.trees[key] = JitFunction(self._of_leaves(structures, names), self.backend, static)
        return inner(*leaves)

    def _of_leaves(self, structures: list, names: list[str]) -> Callable:
        """The function as a function of its arguments' leaves, each a parameter named after its place."""
        def of_leaves(*leaves: object) -> object:
            rest = iter(leaves)
            return self._call([unflatten(structure, rest) for structure in structures])

        of_leaves.__name__ = of_leaves.__qualname__ = self.fn.__name__
        of_leaves.__signature__ = inspect.Signature(
            [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in names])
        return of_leaves

    def _describe(self, args: tuple) -> tuple | None:
        types = tuple(map(type, args))
        describe = self.describers.get(types)
        if describe is None:
            if len(self.describers) >= MAX_DESCRIPTIONS:
                self.describers.clear()
            describe = self.describers[types] = Describer(len(args), _scalar_positions(args)).key
        return describe(args)

    def _traced(self, key: tuple, args: tuple) -> Trace:
        """The trace of signature `key` that serves `args`, traced on a miss; the least recently used
        signature beyond MAX_TRACES is dropped, with its compiled code and cached calls."""
        with self._tables_lock:
            traces = self.fusions.get(key)
            if traces is None:
                traces = self.fusions[key] = []
            self.fusions.move_to_end(key)
            for trace in traces:
                if trace.serves(args):
                    return trace
            trace = self._trace(key, args)
            traces.append(trace)
            dropped = traces[:-MAX_TRACES] + (self.fusions.popitem(last=False)[1]
                                              if len(self.fusions) > MAX_TRACES else [])
            del traces[:-MAX_TRACES]
            if dropped:
                fusions = {id(t.fusion) for t in dropped}
                self.described = {k: e for k, e in self.described.items() if id(e[0].fusion) not in fusions}
            return trace

    def _remember(self, args: tuple, trace: Trace) -> None:
        key = self._describe(args)
        if key is None:
            return
        # the fusion's cached calls file calls by all its inputs: captured arrays too, which `args` lacks
        fast = trace.fusion.__dict__.get("_fast_calls") if self.backend is None and not trace.captured else None
        with self._tables_lock:
            if len(self.described) >= MAX_DESCRIPTIONS:
                self.described.clear()
            self.described[key] = trace, fast if fast is not None and fast.key(args) == key else None

    def _trace(self, key: tuple, args: tuple) -> Trace:
        with Fusion(name=self.fn.__name__ if self.fn.__name__.isidentifier() else "jit") as f:
            traced_args = [self._define(f, sig, name, a) for sig, name, a in zip(key, self.names, args)]
            sizes, size_places = _extent_values(traced_args, args)
            captured: list[object] = []
            f.capture_array = functools.partial(self._capture, f, args, sizes, captured, {})
            try:
                with concretizing(sizes) as used:
                    result = _each_leaf(_constant_as_tensor, self._call(traced_args))
            except (TypeError, Error) as error:
                self._explain_runtime_scalars(error, key)
                self._explain_options(error, args)
                _explain_braze_dtypes(error)
                _explain_torch_sizes(error)
                raise
            finally:
                f.capture_array = None
            results: list[TensorView] = []
            rebuild = _structure(_leaves(self.fn.__name__, result, None, results))
            for out in results:
                f.add_output(out)
        positions = {id(a): i for i, a in enumerate(traced_args) if isinstance(a, TensorView)}
        guard = tuple(sorted((*size_places[s], sizes[s]) for s in used if s in size_places))
        return Trace(f, rebuild, number_check(self.fn.__name__, self.names, f.narrowed_numbers, positions),
                     tuple(captured), guard)

    def _capture(self, f: Fusion, args: tuple, sizes: dict[str, int], captured: list, seen: dict,
                 array: object) -> TensorView:
        """An array the function made or read, as an input of the fusion (one input per array)."""
        if id(array) in seen:
            return seen[id(array)][1]
        value = _beside_the_arguments(array, args)
        sig = _arg_signature(value, f"array {len(captured)} made or read by {self.fn.__name__}", False)
        tv = self._define(f, sig, f"captured{len(captured)}", value)
        sizes.update(_extent_values([tv], [value])[0])  # its sizes are numbers in this trace too
        captured.append(value)
        seen[id(array)] = array, tv  # the array held: its id stays its own
        return tv

    def _call(self, values: list[object]) -> object:
        """fn on one value per parameter: keyword-only parameters (`def f(x, *, eps=1e-5)`) by name."""
        positional, keywords = [], {}
        for parameter, value in zip(self.signature.parameters.values(), values):
            if parameter.kind is parameter.KEYWORD_ONLY:
                keywords[parameter.name] = value
            else:
                positional.append(value)
        return self.fn(*positional, **keywords)

    def _explain_runtime_scalars(self, error: Exception, key: tuple) -> None:
        """A number used as a shape, an axis or in an `if` fails while tracing: say how to bake it in
        (not for what braze has no op for, which no constant changes)."""
        runtime = [name for name, sig in zip(self.names, key) if sig[0] == "scalar"]
        if runtime and not isinstance(error, UnsupportedError) and hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"{self.fn.__name__}: the numbers {', '.join(map(repr, runtime))} are traced as runtime "
                           f"values; bz.jit(static_argnames=(...)) bakes them in as constants")

    def _explain_options(self, error: Exception, args: tuple) -> None:
        """An option given where the function wants an array (`f(x, None)`) fails inside it: name it."""
        options = [f"{name!r} ({value!r})" for i, (name, value) in enumerate(zip(self.names, args))
                   if i not in self.static and _is_option(value) and not isinstance(value, (bool, np.bool_))]
        if options and hasattr(error, "add_note"):
            error.add_note(f"{self.fn.__name__}: {', '.join(options)} baked in as options (None, strings, dtypes and "
                           "tuples are never arrays); pass an array where the function needs data")

    @staticmethod
    def _define(f: Fusion, sig: tuple, name: str, value: object) -> object:
        if sig[0] == "const":
            return _python_value(value)
        if sig[0] == "scalar":
            scalar = f.define_scalar(dtype=_RUNTIME_SCALAR_DTYPES[sig[1]], name=name)
            scalar.python_scalar = True  # as weak as a Python literal, and rounded like one
            return scalar
        _, dtype, is_one, order, kind = sig
        shape = [1 if one else -1 for one in is_one]
        tv = f.define_tensor(shape, dtype, stride_order=order, name=name)
        f.torch_promotion |= kind == "torch"
        f.numpy_size = f.numpy_promotion = not f.torch_promotion
        if kind == "torch" and isinstance(f.array_device, str):  # the first torch tensor's device
            f.array_device = value.device
        # The signature keys by which extents are 1, so this trace never sees a symbolic one that is.
        f.extents_never_one.update(d.extent for d in tv.logical if not d.extent.is_const)
        return tv


def _explain_braze_dtypes(error: Exception) -> None:
    """torch's functions refuse braze's dtypes (`torch.finfo(x.dtype)`) in their own argument parser, before
    braze sees the call: say what to write."""
    if "not DType" in str(error) and hasattr(error, "add_note"):
        error.add_note("x.dtype of a traced tensor is a braze dtype (bz.float32), which torch's own functions do "
                       "not take: write bz.finfo(x.dtype) for torch.finfo(x.dtype), x.new_zeros(shape) or "
                       "torch.zeros_like(x) for torch.zeros(shape, dtype=x.dtype), or name the dtype (torch.float32)")


# torch's words when its parser, given sizes one by one, takes an extent among them for a tensor argument.
_TORCH_SIZES_ONE_BY_ONE = re.compile(r"^\w+\(\) takes 1 positional argument but \d+ were given$")


def _explain_torch_sizes(error: Exception) -> None:
    """`torch.ones(t, t)` or `mask.expand(b, t)` with an extent `t` fails in torch's argument parser, which
    reads an object with `__torch_function__` (an extent has it) as the one argument it dispatches on:
    say to give the sizes as one tuple."""
    if isinstance(error, TypeError) and _TORCH_SIZES_ONE_BY_ONE.match(str(error)) and hasattr(error, "add_note"):
        error.add_note("if a torch function or method was given sizes one by one, extents among them "
                       "(torch.ones(t, t), mask.expand(b, t) with t = x.shape[-1]): give them as one tuple, "
                       "torch.ones((t, t)) or mask.expand((b, t))")


def _extent_values(traced: Sequence[object], values: Sequence[object]
                   ) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """Each symbolic extent of the traced tensors, by name: its size in this call, and its (argument, axis)."""
    sizes, places = {}, {}
    for position, (tv, value) in enumerate(zip(traced, values)):
        if isinstance(tv, TensorView):
            for axis, d in enumerate(tv.logical):
                if not d.extent.is_const:
                    (name,) = d.extent.free_symbols()
                    sizes[name], places[name] = int(value.shape[axis]), (position, axis)
    return sizes, places


def _beside_the_arguments(array: object, args: Sequence[object]) -> object:
    """A captured array where the arguments are: a torch tensor made on the CPU (`torch.ones(n, n)`) or
    a NumPy array moves once to the device of the arguments' torch tensors."""
    if isinstance(array, np.ndarray) and array.dtype == object:  # np.arange(n) of an extent n: its numbers
        array = np.array([int(v) if isinstance(v, Scalar) else v for v in array.ravel()]).reshape(array.shape)
    tensors = [a for a in args if is_torch_tensor(a)]
    if not tensors or not (is_torch_tensor(array) or isinstance(array, np.ndarray)):
        return array
    import torch  # the arguments are torch tensors: torch is there

    return torch.as_tensor(array).to(tensors[0].device)


def _each_leaf(fn: Callable[[object], object], value: object) -> object:
    """`value` with `fn` applied to each item of its tuples, lists and dicts, nested as written."""
    if isinstance(value, dict):
        return {k: _each_leaf(fn, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_each_leaf(fn, v) for v in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else type(value)(items)
    return fn(value)


def _constant_as_tensor(value: object) -> object:
    """A result the trace knows as a number or an array (`x.shape[0]`, `n * dx`, `np.linspace(0, 1, 5)`)
    as a tensor of the fusion, NumPy's array of it, so that each call returns it fresh (an extent at the
    call's size); anything else as it is (`_leaves` names what it cannot return)."""
    if isinstance(value, Scalar):
        return full([], value.value if value.is_const else value, dt.int64)
    if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        return full([], value, dt.from_numpy(np.asarray(value).dtype))
    capture = active_fusion("result").capture_array
    if (isinstance(value, np.ndarray) and value.dtype.kind in "biuf") or is_torch_tensor(value):
        return elementwise("set", capture(value))  # its own buffer, not the array the trace holds
    return value


def _leaves(fn_name: str, value: object, path: str | None, leaves: list[TensorView]) -> object:
    """The result's tensors appended to `leaves`, and its structure with each tensor replaced by its
    position there: a tuple or list (a tuple), a namedtuple, a dict (its keys in order), nested as the
    function wrote it."""
    if isinstance(value, TensorView):
        leaves.append(value)
        return len(leaves) - 1
    if isinstance(value, dict):
        return {k: _leaves(fn_name, v, _item_path(path, repr(k)), leaves) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        items = tuple(_leaves(fn_name, v, _item_path(path, str(i)), leaves) for i, v in enumerate(value))
        return _Container(type(value), items) if hasattr(type(value), "_fields") else items  # a namedtuple stays one
    raise FusionDefinitionError(
        f"{fn_name}: result {path or 0}: expected a TensorView (or a tuple, list or dict of them), got "
        f"{type(value).__name__}")


class _Container(NamedTuple):
    """A result's namedtuple, rebuilt as one."""

    kind: type
    items: tuple


def _item_path(path: str | None, item: str) -> str:
    return item if path is None else f"{path}[{item}]"


def _structure(tree: object) -> Callable[[list], object]:
    """How a call builds its result from the fusion's outputs, in the structure `_leaves` found: the
    cached call of a tensor or a flat tuple rebuilds nothing."""
    if tree == 0:
        return operator.itemgetter(0)
    if isinstance(tree, tuple) and all(isinstance(t, int) for t in tree):
        return tuple
    return functools.partial(_rebuild, tree)


def _rebuild(tree: object, outputs: list) -> object:
    if isinstance(tree, int):
        return outputs[tree]
    if isinstance(tree, dict):
        return {k: _rebuild(v, outputs) for k, v in tree.items()}
    if isinstance(tree, _Container):
        values = [_rebuild(v, outputs) for v in tree.items]
        return tree.kind(*values)
    return tuple(_rebuild(v, outputs) for v in tree)


def jit(fn: Callable | None = None, *, backend: str | None = None, static_argnums: int | Iterable[int] = (),
        static_argnames: str | Iterable[str] = ()) -> JitFunction | Callable[[Callable], JitFunction]:
    """Traces `fn` into a fusion once per input signature: `@bz.jit` or `@bz.jit(backend="reference")`.

    Python `int` and `float` arguments are runtime values (weak scalars: they never widen a
    tensor's dtype), so a new value reuses the compiled fusion; an int must fit the integer dtype of
    the tensors it meets, as in NumPy 2, or the call raises InputError. `static_argnums` (positions) and
    `static_argnames` (names) list arguments baked in as constants instead, traced once per value:
    those used as shapes, axes or in Python control flow. `bool`, `None`, string, dtype and tuple
    arguments (options such as `reduction="mean"`) are always baked.
    """
    argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    argnames = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    if fn is None:
        return lambda f: JitFunction(f, backend, argnums, argnames)
    return JitFunction(fn, backend, argnums, argnames)
