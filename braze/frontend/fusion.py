"""`bz.Fusion`: the nvFuser-style builder. Define inputs, apply ops, add outputs, execute."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack

from braze import dtypes as dt
from braze import engine, ops
from braze.errors import FusionDefinitionError, UnsupportedError
from braze.ir import fusion as ir
from braze.ir.domain import IterDomain, IterType
from braze.ir.scalar import symbol
from braze.ir.tensor import TensorView
from braze.ops import nvfuser as nvfuser_ops
from braze.runtime.inputs import check_scalar_fits

# Ops whose output is a strided view of their input: an output reached from an input through
# these only is an `evaluate` alias (no kernel, no copy).
VIEW_OPS = frozenset({"permute", "slice", "squeeze", "broadcast", "expand", "flip"})


class Fusion(ir.FusionGraph):
    """A tensor program. Use it as a context manager while defining it:

        with bz.Fusion() as f:
            x = f.define_tensor(shape=(-1, -1), dtype=bz.float32)
            f.add_output(bz.ops.exp(x))
        (y,) = f.execute([x_array])

    `f.ops` is `bz.ops` as nvFuser spells it (braze/ops/nvfuser.py), so a definition written for nvFuser
    (`fd.ops.add(t0, t1)`, `fd.ops.var_mean(t0, [-1])`) reads as it is and means what it means there.
    """

    ops = nvfuser_ops

    def __init__(self, name: str = "fusion") -> None:
        super().__init__()
        if not name.isidentifier():
            raise FusionDefinitionError(f"name: expected an identifier (it names the kernels), got {name!r}")
        self.name = name  # kernels are named after it: <name>_t<task>_<tensor>
        self.vectors: list[tuple[TensorView, ...]] = []  # define_vector's scalar inputs, a tuple a vector
        self._scope = ExitStack()

    def __enter__(self) -> Fusion:
        self._scope.enter_context(ir.defining(self))
        return self

    def __exit__(self, *exc) -> None:
        self._scope.close()
        self.freeze("the end of its `with` block")

    # --- inputs --------------------------------------------------------------------------------
    def define_tensor(self, shape: Sequence[int] | None = None, dtype: object = dt.float32,
                      stride_order: Sequence[int] | None = None, name: str | None = None, *,
                      contiguity: bool | Sequence[bool | None] | None = None, is_cpu: bool = False,
                      sizes: Sequence[int] | None = None, strides: Sequence[int] | None = None) -> TensorView:
        """An input tensor. Extents: -1 symbolic, 1 broadcast, n static. `name` labels error messages.
        `contiguity` (nvFuser's flags, one per dimension; its second positional argument, as there, when
        given as a list of flags) is checked for form only: braze reads each input's strides when it runs,
        so any layout is accepted. nvFuser's `sizes=` and `strides=` (an example's, instead of `shape`) give
        a symbolic extent for each size but 1. nvFuser's `is_cpu=True` (a host 0-d tensor in a GPU fusion)
        is a scalar here: `define_scalar(dtype=...)`."""
        self.check_definable("define_tensor")
        if is_cpu:
            raise FusionDefinitionError("define_tensor: is_cpu=True: a host value in a fusion is a scalar input "
                                        "here, define_scalar(dtype=...), passed to execute() as a number")
        if sizes is not None or strides is not None:
            shape = _shape_of_sizes(shape, sizes, strides)
        shape = _check_shape(shape)
        if _is_contiguity(dtype):  # nvFuser's define_tensor(shape, contiguity, dtype)
            if contiguity is not None:
                raise FusionDefinitionError(f"define_tensor: expected one contiguity, got {dtype!r} in place of the "
                                            f"dtype and contiguity={contiguity!r}")
            contiguity, dtype = dtype, dt.float32 if stride_order is None else stride_order
            stride_order = None
        _check_contiguity(contiguity, len(shape))
        dtype = dt.as_dtype(dtype)
        tv = TensorView(self, [], dtype)
        tv.logical = [self._input_dim(tv, axis, e) for axis, e in enumerate(shape)]
        tv.allocation, tv.loop = list(tv.logical), list(tv.logical)
        tv.label = name
        if stride_order is not None:
            tv.set_stride_order(stride_order)
        return self.add_input(tv)

    def from_pytorch(self, tensor: object, static_sizes: bool = False) -> TensorView:
        """nvFuser's `from_pytorch(t)`: an input like `tensor` (a torch tensor, or any array braze reads):
        its dtype and rank, each extent symbolic but 1 (or all as they are with `static_sizes=True`)."""
        shape = getattr(tensor, "shape", None)
        if shape is None or not hasattr(tensor, "dtype"):
            raise FusionDefinitionError(f"from_pytorch: tensor: expected an array or a torch tensor, got "
                                        f"{type(tensor).__name__}")
        extents = [int(e) if static_sizes or e == 1 else -1 for e in shape]
        return self.define_tensor(extents, dt.as_dtype(tensor.dtype))

    def define_vector(self, size: int | Sequence[int], dtype: object = dt.int64) -> list[TensorView]:
        """nvFuser's vector of `size` integer scalar inputs (or as many as a list of values has, as nvFuser
        takes one too), a shape given at run time: execute() takes them one by one, or as one list or
        tuple in their place."""
        self.check_definable("define_vector")
        if isinstance(size, (list, tuple)):
            size = len(size)
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise FusionDefinitionError(f"define_vector: size: expected a non-negative int, got {size!r}")
        dtype = dt.as_dtype(dtype)
        if not dtype.is_integer:
            raise FusionDefinitionError(f"define_vector: dtype: expected an integer dtype, got {dtype.name}")
        vector = [self.define_scalar(dtype=dtype) for _ in range(size)]
        self.vectors.append(tuple(vector))
        return vector

    @staticmethod
    def _input_dim(tv: TensorView, axis: int, extent: int) -> IterDomain:
        if extent == -1:
            return IterDomain(symbol(f"{tv.name}_s{axis}"))
        return IterDomain(extent, IterType.BROADCAST if extent == 1 else IterType.ITERATION)

    def define_scalar(self, value: bool | int | float | None = None, dtype: object = None,
                      name: str | None = None) -> TensorView:
        """A weak scalar: a constant when `value` is given, else an input passed to execute()."""
        self.check_definable("define_scalar")
        if isinstance(value, dt.DType) and dtype is None:  # nvFuser's define_scalar(DataType.Int): an input
            value, dtype = None, value
        if value is None and dtype is None:  # nvFuser's default: a double input
            dtype = dt.float64
        if value is not None and not isinstance(value, (bool, int, float)):
            raise FusionDefinitionError(f"define_scalar: value: expected bool, int or float, got {value!r}")
        dtype = dt.as_dtype(dtype) if dtype is not None else dt.python_scalar_dtype(value)
        if value is not None:
            check_scalar_fits(value, dtype, "define_scalar: value", FusionDefinitionError)
            return TensorView(self, [], dtype, scalar="const", value=value)
        tv = TensorView(self, [], dtype, scalar="input")
        tv.label = name
        return self.add_input(tv)

    # --- outputs -------------------------------------------------------------------------------
    def add_output(self, t: TensorView, alias_input: TensorView | None = None, hidden: bool = False,
                   stride_order: Sequence[int] | None = None, *, alias: TensorView | None = None) -> None:
        """Marks `t` an output. `alias=inp` writes it in place into input `inp` (reuse_buffer) and returns
        it; `hidden=True` computes it without returning it; `stride_order` sets its memory layout.
        nvFuser's `add_output(t, inp)` (or `alias_input=inp`) writes it into `inp` and does not return it,
        as there: the in-place updates of definitions written for nvFuser (running statistics, optimizer
        states) read as they are."""
        self.check_definable("add_output")
        if alias_input is not None:
            if alias is not None:
                raise FusionDefinitionError("add_output: expected one of alias=, alias_input=, got both")
            alias, hidden = alias_input, True
        self.check_owned(t, "add_output")
        if t.overwritten:
            raise UnsupportedError(f"add_output: {t.overwritten}, which NumPy's would see through and braze's "
                                   "does not; take the view after the write, or copy it (.copy()) before")
        if stride_order is not None:
            if t.definition is None or any(o.tv is t for o in self.outputs):
                t = ops.elementwise("set", t)  # a layout of its own, leaving the input's (or output's) alone
            t.set_stride_order(stride_order)
        if alias is not None:
            self.add_output_record(self._reuse_buffer(t, alias, hidden))
            return
        source = self._viewed_input(t)
        kind = ir.AliasKind.EVALUATE if source is not None and stride_order is None else ir.AliasKind.NEW
        self.add_output_record(ir.Output(t, kind, source if kind is ir.AliasKind.EVALUATE else None, hidden))

    def _reuse_buffer(self, t: TensorView, target: TensorView, hidden: bool) -> ir.Output:
        self.check_owned(target, "add_output alias")
        if any(o.aliased_input is target and o.alias is ir.AliasKind.REUSE_BUFFER for o in self.outputs):
            raise FusionDefinitionError(
                f"add_output: alias: input {target.describe()} is already written in place by another output"
            )
        if not any(target is i for i in self.inputs) or target.scalar is not None:
            raise FusionDefinitionError(
                f"add_output: alias: expected an input tensor of this fusion, got {target.name}"
            )
        if t.dtype != target.dtype or t.ndim != target.ndim:
            raise FusionDefinitionError(
                f"add_output: alias between incompatible shapes: {t.name} is {t.type_text()}, "
                f"input {target.describe()} is {target.type_text()}"
            )
        for axis, (a, b) in enumerate(zip(t.shape, target.shape)):
            self.require_equal(a, b, f"add_output: alias between incompatible shapes: dimension {axis} of "
                                     f"{t.name} and input {target.describe()}")
        return ir.Output(t, ir.AliasKind.REUSE_BUFFER, target, hidden)

    def _viewed_input(self, t: TensorView) -> TensorView | None:
        """The input that `t` is a strided view of, if only view ops lead to it."""
        while t.definition is not None and t.definition.op in VIEW_OPS:
            t = t.definition.inputs[0]
        is_input = t.definition is None and t.scalar is None and any(t is i for i in self.inputs)
        return t if is_input else None

    # --- running -------------------------------------------------------------------------------
    def execute(self, inputs: Sequence[object], backend: str | None = None, device: str | None = None,
                stream: object = None) -> list:
        """Runs the fusion: arrays in, the same kind out, one per visible output. GPU arrays run on
        their library's current stream, or on `stream` (a torch or CuPy stream, or a CUstream handle)."""
        if backend is None and device is None and stream is None:  # the cached call, one layer sooner
            fast = self.__dict__.get("_fast_calls")  # runtime/fast_call.py: the native call first, else Python
            outputs = (fast.native or fast.run)(inputs) if fast is not None else None
            if outputs is not None:
                return outputs
        if self.vectors:
            inputs = self._spread_vectors(inputs)
        return engine.execute(self, inputs, backend=backend, device=device, stream=stream)

    def _spread_vectors(self, values: Sequence[object]) -> Sequence[object]:
        """The inputs with each define_vector's values given as one list or tuple spread in its place."""
        if not isinstance(values, Sequence) or len(values) == len(self.inputs):
            return values
        lengths = {id(vector[0]): len(vector) for vector in self.vectors if vector}
        spread: list[object] = []
        for value in values:
            at = self.inputs[len(spread)] if len(spread) < len(self.inputs) else None
            if isinstance(value, (list, tuple)) and len(value) == lengths.get(id(at), -1):
                spread.extend(value)
            else:
                spread.append(value)
        return spread


def _is_contiguity(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(v is None or isinstance(v, bool) for v in value)


def _check_contiguity(contiguity: object, rank: int) -> None:
    """nvFuser's contiguity: one bool, or a bool (None for a broadcast dimension) per dimension."""
    if contiguity is None or isinstance(contiguity, bool):
        return
    if not _is_contiguity(contiguity) or len(contiguity) != rank:
        raise FusionDefinitionError(
            f"define_tensor: contiguity: expected a bool or one flag (True, False or None) for each of {rank} "
            f"dimensions, got {contiguity!r}")


def _shape_of_sizes(shape: object, sizes: Sequence[int] | None, strides: Sequence[int] | None) -> list[int]:
    """nvFuser's `define_tensor(sizes=, strides=)`: a symbolic extent for each size but 1; the strides
    are read from each input when it runs, so they are checked for form only."""
    if sizes is None or shape is not None:
        raise FusionDefinitionError("define_tensor: sizes=, strides=: expected sizes (and maybe strides) in place "
                                    f"of shape, got shape={shape!r}, sizes={sizes!r}, strides={strides!r}")
    sizes = list(_check_shape(sizes))
    if strides is not None and (not isinstance(strides, Sequence) or len(strides) != len(sizes)):
        raise FusionDefinitionError(f"define_tensor: strides: expected {len(sizes)} strides, one per size, "
                                    f"got {strides!r}")
    return [1 if e == 1 else -1 for e in sizes]


def _check_shape(shape: Sequence[int]) -> tuple[int, ...]:
    if isinstance(shape, int) or not isinstance(shape, Sequence):
        raise FusionDefinitionError(f"define_tensor: shape: expected a sequence of ints, got {shape!r}")
    for axis, e in enumerate(shape):
        if not isinstance(e, int) or isinstance(e, bool) or e < -1:
            raise FusionDefinitionError(f"define_tensor: shape[{axis}]: expected -1 or an extent >= 0, got {e!r}")
    return tuple(shape)
