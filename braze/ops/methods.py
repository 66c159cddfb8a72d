"""Python operators and methods on TensorView (`x + b`, `x.sum(1)`, `x[:, ::2]`, `x.T`).

They live here rather than in `braze.ir` because the IR imports no op; installing them when the
op table loads keeps that rule.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from braze.errors import FusionDefinitionError, TracerBoolConversionError, UnsupportedError
from braze.ir.fusion import active_fusion
from braze.ir.scalar import Scalar, as_scalar, caller_site, concrete_value
from braze.ir.tensor import TensorView
from braze.ops import numpy_api, scans, torch_functions, torch_methods, view_composites, views
from braze.ops import reductions as red
from braze.ops.elementwise import cast, elementwise
from braze.ops.numpy_einsum import matrix_product_error
from braze.ops.table import size_number

_BINARY_OPERATORS = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "truediv", "floordiv": "floordiv",
    "mod": "remainder", "pow": "pow", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "left_shift", "rshift": "right_shift",
}
_COMPARISONS = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
_UNARY_OPERATORS = {"neg": "neg", "abs": "abs", "invert": "bitwise_not"}
_REDUCTION_METHODS = ("sum", "prod", "max", "min", "mean", "var", "any", "all", "argmax", "argmin")


def _binary(op: str, reflected: bool = False):
    if reflected:
        return lambda self, other: elementwise(op, other, self)
    return lambda self, other: elementwise(op, self, other)


def _getitem(x: TensorView, index) -> TensorView:
    """NumPy's indexing: ints, slices, None (new axis), one Ellipsis, and one integer array along one
    axis (`x[:, [2, 1, 0]]`, `table[ids]`) or several picking one element each (`_pick_elements`)."""
    items = [_python_index(i) for i in (index if isinstance(index, tuple) else [index])]
    capture = torch_functions._capturing_fusion()
    if capture is not None:  # `logp[torch.arange(n), labels]`: a torch tensor made in the trace is an input of it
        items = [torch_functions._captured(capture, i) for i in items]
    for position, item in enumerate(items):
        _check_index_item(x, position, item)
    if sum(i is Ellipsis for i in items) > 1:
        raise FusionDefinitionError(f"indexing {x.describe()}: expected at most one '...', got {index!r}")
    consumed = sum(i is not None and i is not Ellipsis for i in items)
    if consumed > x.ndim:
        raise FusionDefinitionError(f"indexing {x.describe()}: {consumed} indices for {x.ndim} dimensions")
    if any(i is Ellipsis for i in items):  # by identity: `in` would compare tensors with ==
        at = next(n for n, i in enumerate(items) if i is Ellipsis)
        items[at : at + 1] = [slice(None)] * (x.ndim - consumed)
    arrays = [n for n, item in enumerate(items) if _is_index_array(item)]
    if len(arrays) > 1:
        return _pick_elements(x, items, arrays)
    picks = items[arrays[0]] if arrays else None
    if arrays:
        items[arrays[0]] = slice(None)
    slices, new_axes, dropped, out_axis, picked_axis = [], [], [], 0, None
    for n, item in enumerate(items):
        if item is None:
            new_axes.append(out_axis)
            out_axis += 1
        elif isinstance(item, Scalar):  # an integer scalar input's value (nvFuser's select): never negative
            slices.append(slice(item, item + 1, 1))
            dropped.append((len(slices) - 1, item))
        elif isinstance(item, int) and not isinstance(item, bool):
            stop = item + 1 if item != -1 else None
            slices.append(slice(item, stop, 1))
            dropped.append((len(slices) - 1, item))
        else:
            picked_axis = out_axis if arrays and n == arrays[0] else picked_axis
            slices.append(item)
            out_axis += 1
    y = views.slice_tensor(x, slices)
    for axis, item in dropped:  # an int index must select exactly one element
        why = f"indexing {x.describe()}: index {item} of dimension {axis} must lie within its extent"
        x.fusion.require_equal(y.shape[axis], as_scalar(1), why)
    y = views.squeeze(y, [axis for axis, _ in dropped]) if dropped else y
    for axis in new_axes:
        y = views.unsqueeze(y, axis)
    if picks is None:
        return y
    return _take_picks(x, y, picks, picked_axis, _picks_go_first(items, arrays[0]))


def _pick_elements(x: TensorView, items: list, arrays: list[int]) -> TensorView:
    """`x[rows, cols]` (`logp[np.arange(n), labels]`): several integer arrays, broadcast together, pick one
    element each, as NumPy's advanced indexing does. Their axes are merged into one and each pick's flat
    position there taken; the picks' axes stand where the picked ones were when those are side by side, else
    first, as in NumPy. Negative indices count from the end; one out of its axis's range may land in
    another row (NumPy raises)."""
    what = f"indexing {x.describe()}"
    if any(item is None or isinstance(item, int) and not isinstance(item, bool) for item in items):
        raise UnsupportedError(f"{what}: indices {arrays[0]} and {arrays[1]} are integer arrays beside an int or "
                               "None: braze takes several arrays with slices only (index the int first, x[k][rows, "
                               "cols], or one axis at a time)")
    picks = [_index_tensor(what, items[n]) for n in arrays]
    y = views.slice_tensor(x, [slice(None) if n in arrays else item for n, item in enumerate(items)])
    at = arrays[0] if arrays == list(range(arrays[0], arrays[0] + len(arrays))) else 0
    rest = [a for a in range(y.ndim) if a not in arrays]
    y = views.permute(y, rest[:at] + arrays + rest[at:])
    extents = y.shape[at:at + len(arrays)]
    flat, size = None, 1
    for pick, extent in zip(picks, extents):
        pick = cast(pick, "int64")
        pick = elementwise("where", elementwise("lt", pick, 0), elementwise("add", pick, extent), pick)
        flat = pick if flat is None else elementwise("add", elementwise("mul", flat, extent), pick)
        size = size * extent
    merged = views.reshape(y, [*y.shape[:at], size, *y.shape[at + len(arrays):]])
    return view_composites.take(merged, flat, at)


def _index_tensor(what: str, item: object) -> TensorView:
    """An integer index array as a tensor of the trace (a list or ndarray taken in as an input)."""
    if isinstance(item, list):
        item = np.asarray(item, dtype=np.int64)
    return numpy_api.trace_operand(what, item) if isinstance(item, np.ndarray) else item


def _is_index_array(item: object) -> bool:
    return isinstance(item, (list, np.ndarray, TensorView))


def _picks_go_first(items: list, array_at: int) -> bool:
    """NumPy's rule: where ints (which index as arrays do) and the array are not side by side, the
    array's axes come first in the result."""
    advanced = [n for n, item in enumerate(items) if n == array_at or (isinstance(item, int) and
                                                                    not isinstance(item, bool))]
    return advanced[-1] - advanced[0] + 1 != len(advanced)


# A list of more ints is a gather: as many joined slices would make as many pieces to compile.
MOST_JOINED_SLICES = 16


def _take_picks(x: TensorView, y: TensorView, picks: object, axis: int, first: bool) -> TensorView:
    """`y` with `axis` replaced by the elements `picks` names: a short list of ints as slices joined
    (exact, with no gather), an array or tensor of integers (or a long list) as a gather (`take`)."""
    if isinstance(picks, list) and len(picks) > MOST_JOINED_SLICES:
        picks = np.asarray(picks, dtype=np.int64)
    if isinstance(picks, list):
        taken = _slices_joined(x, y, picks, axis)
        ndim = 1
    else:
        if isinstance(picks, np.ndarray):
            picks = numpy_api.trace_operand(f"indexing {x.describe()}", picks)
        taken = view_composites.take(y, picks, axis)
        ndim = picks.ndim
    if not first or axis == 0:
        return taken
    order = [*range(axis, axis + ndim), *range(axis), *range(axis + ndim, taken.ndim)]
    return views.permute(taken, order)


def _slices_joined(x: TensorView, y: TensorView, picks: list, axis: int) -> TensorView:
    if not picks:
        raise UnsupportedError(f"indexing {x.describe()}: dimension {axis}: expected a non-empty list of indices, "
                               "got [] (a result of extent 0 along it: slice it, x[..., :0, ...])")
    pieces = []
    for pick in map(int, picks):
        piece = views.slice_tensor(y, [slice(None)] * axis + [slice(pick, pick + 1 if pick != -1 else None)])
        why = f"indexing {x.describe()}: index {pick} of dimension {axis} must lie within its extent"
        x.fusion.require_equal(piece.shape[axis], as_scalar(1), why)
        pieces.append(piece)
    return views.cat(pieces, axis) if len(pieces) > 1 else pieces[0]


def _python_index(item: object) -> object:
    """NumPy's integers index as ints do (`x[np.argmax(sizes)]`), in slices too."""
    if isinstance(item, np.integer):
        return int(item)
    if isinstance(item, slice) and any(isinstance(v, np.integer) for v in (item.start, item.stop, item.step)):
        return slice(*(int(v) if isinstance(v, np.integer) else v for v in (item.start, item.stop, item.step)))
    return item


def _check_index_item(x: TensorView, position: int, item: object) -> None:
    """Ints, slices, None, '...' and integer arrays (a list of ints, an integer ndarray or tensor); a
    boolean mask, whose result's length depends on the data, is refused by name."""
    if item is None or item is Ellipsis or isinstance(item, slice):
        return
    if isinstance(item, (int, Scalar)) and not isinstance(item, bool):
        return
    kind = _index_array_kind(item)
    if kind == "i":
        return
    what = (f"indexing {x.describe()}: index {position}: expected ints, slices, None, '...' or one integer array, "
            "got ")
    if kind == "b":
        raise UnsupportedError(f"{what}a boolean mask: the result's length depends on the data, which a fusion's "
                               "extents cannot; keep the shape and choose per element instead "
                               "(np.where(mask, x, 0).sum() for x[mask].sum())")
    shown = f"tensor {item.describe()} of type {item.type_text()}" if isinstance(item, TensorView) else \
        f"{type(item).__name__} {item!r}"
    raise UnsupportedError(f"{what}{shown}")


def _index_array_kind(item: object) -> str | None:
    """'i' for an integer array index, 'b' for a boolean one, None for anything else."""
    if isinstance(item, TensorView):
        return "b" if item.dtype.name == "bool" else "i" if item.dtype.is_integer else None
    if isinstance(item, np.ndarray):
        return "b" if item.dtype == np.bool_ else "i" if item.dtype.kind in "iu" else None
    if isinstance(item, list) and item and all(isinstance(v, (bool, np.bool_)) for v in item):
        return "b"
    if isinstance(item, list) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in item):
        return "i"
    return None


def _matmul(self, other):
    raise matrix_product_error("matmul (@)", self, other)


def _rmatmul(self, other):
    raise matrix_product_error("matmul (@)", other, self)


def install(cls: type = TensorView) -> None:
    """Puts the operators and methods on TensorView."""
    for dunder, op in {**_BINARY_OPERATORS, **_COMPARISONS}.items():
        setattr(cls, f"__{dunder}__", _binary(op))
    for dunder, op in _BINARY_OPERATORS.items():
        setattr(cls, f"__r{dunder}__", _binary(op, reflected=True))
    for dunder, op in _UNARY_OPERATORS.items():
        setattr(cls, f"__{dunder}__", lambda self, op=op: elementwise(op, self))
    cls.__hash__ = object.__hash__  # __eq__ builds an expression; identity stays the hash
    cls.__pos__ = lambda self: self
    cls.__matmul__, cls.__rmatmul__ = _matmul, _rmatmul
    cls.__getitem__ = _getitem
    for name in _REDUCTION_METHODS:
        setattr(cls, name, getattr(red, name))
    for name in ("sum", "prod", "mean", "any", "all"):
        setattr(cls, name, _numpy_keywords(getattr(red, name), numpy_api.reduction(name)))
    cls.std = red.std
    for name in scans.SCANS:  # values only; torch_methods gives cummax(dim=) and cummin(dim=) indices too
        setattr(cls, name, getattr(scans, name))
    cls.cumsum, cls.cumprod = _flattening_scan(scans.cumsum), _flattening_scan(scans.cumprod)
    cls.T = property(lambda self: views.permute(self, tuple(reversed(range(self.ndim)))))
    cls.reshape = lambda self, *shape: views.reshape(self, torch_methods.sizes(shape))
    cls.permute = lambda self, *dims: views.permute(self, torch_methods.sizes(dims))
    cls.transpose = _transpose
    cls.squeeze = views.squeeze
    cls.unsqueeze = views.unsqueeze
    cls.flip = _flip
    cls.__float__ = _number_or_refuse(float, "float({name})")
    cls.__int__ = _number_or_refuse(int, "int({name})")
    cls.__index__ = _number_or_refuse(operator.index, "{name} used as a Python int")
    cls.__bool__ = _number_or_refuse(bool, "bool({name})", refuse=_TENSOR_BOOL)
    cls.item = _no_python_value("{name}.item()")
    cls.tolist = _no_python_value("{name}.tolist()")
    cls.numpy = _no_python_value("{name}.numpy()")
    cls.__array__ = _no_python_value(  # not an object array holding the tensor
        "np.asarray({name})", "; to write it into a NumPy array the function made (out = np.zeros((n, 3)); "
        "out[:, 0] = t), make that array from a traced one, out = np.zeros_like(x, shape=(n, 3)), or join the "
        "pieces with np.stack")
    cls.__setitem__ = view_composites.assign
    cls.__round__ = cls.round = _round
    cls.__divmod__ = _divmod
    cls.__rdivmod__ = lambda self, other: _divmod(self, other, reflected=True)
    cls.ravel = lambda self, order="C": views.reshape(self, [-1])
    cls.itemsize = property(lambda self: self.dtype.itemsize)
    cls.nbytes = property(lambda self: self.numel() * self.dtype.itemsize)
    cls.astype = _astype
    cls.__len__ = _len
    torch_methods.install(cls)
    torch_functions.install(cls)
    numpy_api.install(cls)


def _numpy_keywords(reduce: Callable[..., TensorView], numpy_reduce: Callable[..., TensorView]):
    """`x.sum(axis=1, where=mask)`: a call with NumPy's `where=`, `initial=` or `out=` is NumPy's method;
    the others braze's (which also takes torch's `dim=`)."""
    def method(self: TensorView, *args: object, **kwargs: object) -> TensorView:
        if {"where", "initial", "out"} & kwargs.keys():
            return numpy_reduce(self, *args, **kwargs)
        return reduce(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = reduce.__name__
    method.__doc__ = reduce.__doc__
    return method


def _astype(x: TensorView, dtype: object, copy: bool = True) -> TensorView:
    """NumPy's `x.astype(dtype, copy=False)`: a fusion's values are never buffers, so `copy` changes nothing."""
    return cast(x, dtype)


def _len(x: TensorView) -> int:
    """`len(x)`: the first extent, as NumPy and torch give it, when the fusion knows it."""
    if x.ndim == 0:
        raise FusionDefinitionError(f"len({x.describe()}): a tensor of rank 0 has no length")
    return _extent_index(x.shape[0], f"as len({x.name}) (the length of {x.describe()}); x.shape[0] keeps it symbolic")


def _transpose(x: TensorView, *axes: object) -> TensorView:
    """torch's `x.transpose(dim0, dim1)` swaps two axes; NumPy's `x.transpose()` reverses them all and
    `x.transpose(2, 0, 1)` or `x.transpose((2, 0, 1))` permutes them (an axis each). Two axes of a
    matrix swap either way, except `(0, 1)`: torch's spelling, it swaps."""
    if not axes:
        return views.permute(x, tuple(reversed(range(x.ndim))))
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        return views.permute(x, tuple(axes[0]))
    if len(axes) == x.ndim != 2:
        return views.permute(x, axes)
    return views.transpose(x, *axes)


def _flip(x: TensorView, *dims: int, **axes: object) -> TensorView:
    """`x.flip(0, 1)` (torch's dims one by one) as well as `x.flip((0, 1))` and `x.flip(dims=...)`."""
    return views.flip(x, dims if len(dims) > 1 else dims[0], **axes) if dims else views.flip(x, **axes)


def _extent_operator(op: str, dunder: str, reflected: bool):
    """An operator of Scalar that stays symbolic with ints and extents (`n - 1`), and becomes a value
    of the fusion being defined with a float (`1.0 / n`, `n * 0.5`). True division is always a
    value, as `int / int` is a float in Python."""
    symbolic = getattr(Scalar, dunder, None)

    def operator(self: Scalar, other: object):
        if op != "truediv" and symbolic is not None:
            result = symbolic(self, other)
            if result is not NotImplemented or not isinstance(other, float):
                return result
        if not isinstance(other, (int, float, Scalar)) or isinstance(other, bool) or not _defining():
            return NotImplemented  # a TensorView's reflected operator builds the op; else a TypeError
        if op == "pow" and not reflected and isinstance(other, int) and other < 0:
            other = float(other)  # as in Python, n ** -1 is a float, not an integer power
        return elementwise(op, other, self) if reflected else elementwise(op, self, other)

    return operator


def _defining() -> bool:
    try:
        active_fusion("")
    except FusionDefinitionError:
        return False
    return True


def _extent_float(self: Scalar) -> float:
    """A static extent is its number; a symbolic one has none while the fusion is defined, so
    `math.sqrt(x.shape[-1])` says how to compute with it instead of failing in `math`."""
    value = concrete_value(self)  # a static extent, or one whose size a trace specializes on
    if value is not None:
        return float(value)
    raise TracerBoolConversionError(
        f"float(extent {self}): extents are symbolic while a fusion is defined (one compiled fusion serves "
        "every size), so they have no Python float value; compute with them in the fusion instead "
        "(x.shape[-1] ** -0.5, bz.ops.sqrt(x.shape[-1])), or give the dimension a static size")


def _extent_int(self: Scalar) -> int:
    """`int(x.shape[0])`: a static extent's number; a symbolic one says how to bake the size in."""
    value = concrete_value(self)  # a static extent, or one whose size a trace specializes on
    if value is not None:
        return int(value)
    raise TracerBoolConversionError(
        f"int(extent {self}): extents are symbolic while a fusion is defined (one compiled fusion serves "
        "every size), so they have no Python int value; use the extent itself (x.reshape(x.shape[0], -1), "
        "x.sum(1) / x.shape[1]), or give the dimension a static size")


def _no_python_value(what: str, more: str = ""):
    def refuse(self, *args, **kwargs):
        raise TracerBoolConversionError(
            f"{what.format(name=self.name)}: expected a Python value, got a traced tensor: its data is only known "
            "when the fusion runs; keep computing with it in the fusion (bz.ops.where for a choice per element), "
            f"or return it and read the result{more}")

    return refuse


_TENSOR_BOOL = TensorView.__bool__  # what `if x:` says of a tensor (braze/ir/tensor.py)


def _number_or_refuse(convert: Callable[[object], object], what: str, refuse: Callable | None = None):
    """A value computed from sizes alone is a number where the sizes are (np.arange(n) divides n by its
    step, then asks if the quotient is positive); any other tensor has no Python value."""
    refuse = refuse or _no_python_value(what)

    def number(self, *args, **kwargs):
        value = size_number(self)
        if value is None:
            return refuse(self, *args, **kwargs)
        return convert(value.item() if convert is operator.index else value)

    return number


def _round(self, decimals: int = 0, out: None = None) -> TensorView:
    """`x.round(2)` (NumPy's), `x.round(decimals=2)` (torch's) and Python's `round(x, 2)`: half to even,
    as both round."""
    return numpy_api.round_decimals(self, 0 if decimals is None else operator.index(decimals), out)


def _flattening_scan(scan: Callable[..., TensorView]) -> Callable[..., TensorView]:
    """NumPy's `x.cumsum()`: with no axis, along the flattened array; torch's `x.cumsum(dim=1)` as it is."""
    def method(self: TensorView, axis: int | None = None, *args: object, **kwargs: object) -> TensorView:
        if axis is not None:
            return scan(self, axis, *args, **kwargs)
        if {"axis", "dim"} & kwargs.keys():
            return scan(self, *args, **kwargs)
        return scan(views.reshape(self, [-1]), 0, *args, **kwargs)

    method.__name__ = method.__qualname__ = scan.__name__
    method.__doc__ = scan.__doc__
    return method


def _divmod(self: TensorView, other: object, reflected: bool = False) -> tuple[TensorView, TensorView]:
    a, b = (other, self) if reflected else (self, other)
    return elementwise("floordiv", a, b), elementwise("remainder", a, b)


def _extent_index(self: Scalar, use: str = "used as a Python int (range(), np.ones(x.shape), ...)") -> int:
    """`range(n)`, `np.ones(x.shape)`: a static extent is an index; a symbolic one says what to write
    instead of Python's "cannot be interpreted as an integer"."""
    value = concrete_value(self, caller_site())  # a static extent, or one whose size a trace specializes on
    if value is not None:
        return int(value)
    raise TracerBoolConversionError(
        f"extent {self} {use}: extents are symbolic while a "
        "fusion is defined (one compiled fusion serves every size); make tensors of a shape with braze's ops "
        "(bz.ops.ones(x.shape), bz.ops.arange(x.shape[0])), or give the dimension a static size")


def _extent_ufunc(self: Scalar, ufunc, method: str, *inputs: object, **kwargs: object) -> object:
    """A NumPy ufunc on extents. Integer arithmetic stays an extent, as it was before NumPy asked
    (`np.int64(2) * n`, through object arrays); what extents cannot compute (`np.sqrt(x.shape[-1])`,
    attention's scale) becomes a value of the fusion being defined, as `bz.ops.sqrt` of an extent does.
    Neither asks for the extent's number, so a @bz.jit trace does not specialize on its size."""
    if _defining() and any(isinstance(v, np.ndarray) and v.ndim for v in inputs):
        # `np.arange(n) / n`: through object arrays each element would become a value of its own, an array
        # of them that no op takes; the array is an input of the fusion instead, divided there
        return numpy_api.array_ufunc(self, ufunc, method, *inputs, **kwargs)
    objects = [np.asarray(v, dtype=object) if isinstance(v, Scalar) else v for v in inputs]
    try:
        result = getattr(ufunc, method)(*objects, **kwargs)
    except TypeError:
        if not _defining():
            raise
        return numpy_api.array_ufunc(self, ufunc, method, *inputs, **kwargs)
    return result[()] if isinstance(result, np.ndarray) and result.ndim == 0 else result


def install_extent_operators() -> None:
    """Lets extents (`x.shape[1]`) take part in float arithmetic: `x * (1.0 / x.shape[-1])`,
    `x.shape[-1] ** -0.5` (attention's scale)."""
    for op in ("add", "sub", "mul", "truediv", "pow"):
        for reflected in (False, True):
            dunder = f"__{'r' * reflected}{op}__"
            setattr(Scalar, dunder, _extent_operator(op, dunder, reflected))
    Scalar.__float__ = _extent_float
    Scalar.__int__ = _extent_int
    Scalar.__index__ = _extent_index
    Scalar.__array_ufunc__ = _extent_ufunc
    # torch parses `torch.reshape(x, (x.shape[0] * x.shape[1], -1))` before it dispatches: an extent in
    # its list of ints must take torch's protocol too, or torch refuses it as "must be tuple of ints"
    Scalar.__torch_function__ = classmethod(torch_functions.torch_function)
