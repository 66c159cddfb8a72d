"""`@bz.jit`: traces a function of tensors into a Fusion, once per input signature."""

from __future__ import annotations

import functools
import inspect
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from braze import dtypes as dt
from braze.errors import Error, FusionDefinitionError, InputError
from braze.frontend.fusion import Fusion
from braze.ir.tensor import TensorView
from braze.runtime.arrays import as_host_array
from braze.runtime.device_arrays import as_device_view, is_device_array
from braze.runtime.fast_call import MAX_DESCRIPTIONS, Describer
from braze.runtime.inputs import stride_order_of

_SCALARS = (bool, int, float)
MAX_TRACES = 64  # fusions kept per jit function, one per signature


def _is_default_order(order: tuple[int, ...]) -> bool:
    return order == tuple(reversed(range(len(order))))


def _tensor_signature(array: np.ndarray, kind: str) -> tuple:
    """Rank, dtype, which extents are 1 (they broadcast), stride order and array kind."""
    order = stride_order_of(array)
    return ("tensor", dt.from_numpy(array.dtype), tuple(s == 1 for s in array.shape),
            None if _is_default_order(order) else order, kind)


def _arg_signature(value: object, name: str) -> tuple:
    if isinstance(value, _SCALARS) or isinstance(value, np.generic):
        value = value.item() if isinstance(value, np.generic) else value
        # Python scalars are weak constants baked into the trace. Floats key by their bits, so
        # -0.0 and 0.0 get traces of their own and a NaN finds its trace again.
        identity = value.hex() if isinstance(value, float) else value
        return ("const", type(value), identity)
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


class JitFunction:
    """A traced function. Calling it looks up (or traces) the fusion for the arguments' signature."""

    def __init__(self, fn: Callable, backend: str | None = None) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.backend = backend
        self.signature = inspect.signature(fn)
        self.names = list(self.signature.parameters)
        self.fusions: OrderedDict[tuple, tuple[Fusion, bool]] = OrderedDict()  # the last MAX_TRACES used
        # Arrays by their full description (dtype, shape, strides, device), so a repeated call
        # skips binding and signatures: the fusion's own cached call does the rest.
        self.describe = Describer(len(self.names), frozenset()).key
        self.described: dict[tuple, tuple[Fusion, bool]] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        known = self._known(args) if not kwargs else None
        if known is not None:  # the fast path: torch tensors seen before, in full
            fusion, returns_sequence = known
            # Without keywords where none are needed: the fusion's native cached call takes none.
            outputs = fusion.execute(args) if self.backend is None else fusion.execute(args, backend=self.backend)
            return tuple(outputs) if returns_sequence else outputs[0]
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            given = len(args) + len(kwargs)
            raise InputError(f"{self.fn.__name__}: expected {len(self.names)} arguments, got {given}") from None
        bound.apply_defaults()
        args = tuple(bound.arguments[name] for name in self.names)
        key = tuple(_arg_signature(a, n) for a, n in zip(args, self.names))
        fusion, returns_sequence = self._traced(key, args)
        tensors = [a for a, sig in zip(args, key) if sig[0] == "tensor"]
        outputs = fusion.execute(tensors, backend=self.backend)
        if not kwargs and len(tensors) == len(args) == len(self.names):
            self._remember(args, (fusion, returns_sequence))
        return tuple(outputs) if returns_sequence else outputs[0]

    def _traced(self, key: tuple, args: tuple) -> tuple[Fusion, bool]:
        """The fusion of signature `key`, traced on a miss; the least recently used beyond
        MAX_TRACES is dropped, with its compiled code and cached calls."""
        entry = self.fusions.get(key)
        if entry is not None:
            self.fusions.move_to_end(key)
            return entry
        entry = self.fusions[key] = self._trace(key, args)
        if len(self.fusions) > MAX_TRACES:
            _, (dropped, _) = self.fusions.popitem(last=False)
            self.described = {k: e for k, e in self.described.items() if e[0] is not dropped}
        return entry

    def _known(self, args: tuple) -> tuple[Fusion, bool] | None:
        """The fusion of arguments that are all arrays described before."""
        return self.described.get(self.describe(args)) if len(args) == len(self.names) else None

    def _remember(self, args: tuple, entry: tuple[Fusion, bool]) -> None:
        key = self.describe(args)
        if key is None:
            return
        if len(self.described) >= MAX_DESCRIPTIONS:
            self.described.clear()
        self.described[key] = entry

    def _trace(self, key: tuple, args: tuple) -> tuple[Fusion, bool]:
        with Fusion(name=self.fn.__name__ if self.fn.__name__.isidentifier() else "jit") as f:
            traced_args = [self._define(f, sig, name, a) for sig, name, a in zip(key, self.names, args)]
            result = self.fn(*traced_args)
            returns_sequence = isinstance(result, Sequence)
            results = list(result) if returns_sequence else [result]
            for position, out in enumerate(results):
                if not isinstance(out, TensorView):
                    raise FusionDefinitionError(
                        f"{self.fn.__name__}: result {position}: expected a TensorView, got {type(out).__name__}"
                    )
                f.add_output(out)
        return f, returns_sequence

    @staticmethod
    def _define(f: Fusion, sig: tuple, name: str, value: object) -> object:
        if sig[0] == "const":
            return value.item() if isinstance(value, np.generic) else value
        _, dtype, is_one, order, _kind = sig
        shape = [1 if one else -1 for one in is_one]
        return f.define_tensor(shape, dtype, stride_order=order, name=name)


def jit(fn: Callable | None = None, *, backend: str | None = None) -> JitFunction | Callable:
    """Decorator: `@bz.jit` or `@bz.jit(backend="reference")`."""
    if fn is None:
        return lambda f: JitFunction(f, backend)
    return JitFunction(fn, backend)
