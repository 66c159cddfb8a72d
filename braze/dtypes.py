"""braze dtypes and type promotion (the Python array API rules, with weak Python scalars)."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from braze.errors import UnsupportedError

# Category order for promotion across kinds: bool < integer < floating (unsigned integers are integers).
_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2}


@dataclass(frozen=True)
class DType:
    """A braze element type: a name, a kind (NumPy's letters: b bool, i signed integer, u unsigned
    integer, f floating) and a size in bytes."""

    name: str
    kind: str
    itemsize: int

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype that stores this type (bfloat16 comes from ml_dtypes)."""
        return _NUMPY[self.name]

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype, under the attribute NumPy reads a dtype from: `np.zeros(n, x.dtype)` in a
        `@bz.jit` function, where `x.dtype` is a braze dtype."""
        return _NUMPY[self.name]

    @property
    def is_floating(self) -> bool:
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        """Signed or unsigned integer."""
        return self.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def category(self) -> str:
        """The kind as the op table and promotion see it: 'b', 'i' (any integer) or 'f'."""
        return "i" if self.kind == "u" else self.kind

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    def __eq__(self, other: object) -> bool:
        """Equal to another DType of the same name, and to the torch or NumPy dtype (or its name) of the
        same type, so model code's `x.dtype == torch.float16` means under `@bz.jit` what it means in torch."""
        if isinstance(other, DType):
            return self.name == other.name
        if type(other).__module__ == "torch" or isinstance(other, (np.dtype, str, type)):
            try:
                return as_dtype(other).name == self.name
            except UnsupportedError:
                return False
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"bz.{self.name}"

    def __str__(self) -> str:
        return self.name


bool_ = DType("bool", "b", 1)
int8 = DType("int8", "i", 1)
int16 = DType("int16", "i", 2)
int32 = DType("int32", "i", 4)
int64 = DType("int64", "i", 8)
uint8 = DType("uint8", "u", 1)
uint16 = DType("uint16", "u", 2)
uint32 = DType("uint32", "u", 4)
uint64 = DType("uint64", "u", 8)
float16 = DType("float16", "f", 2)
bfloat16 = DType("bfloat16", "f", 2)
float32 = DType("float32", "f", 4)
float64 = DType("float64", "f", 8)



# nvFuser's dtypes braze has no type for: the name says what it is, so the error can say so.
_NVFUSER_ONLY_DTYPES = {"ComplexFloat": "complex64", "ComplexDouble": "complex128",
                        **{name: "an 8-bit float" for name in ("Float8_e4m3fn", "Float8_e5m2", "Float8_e8m0fnu")},
                        **{name: "a 4-bit float" for name in ("Float4_e2m1fn", "Float4_e2m1fn_x2")}}


class _NvfuserDTypeNames(type):
    def __getattr__(cls, name: str) -> object:
        if name in _NVFUSER_ONLY_DTYPES:
            raise UnsupportedError(f"DataType.{name}: braze has no {_NVFUSER_ONLY_DTYPES[name]} dtype; its dtypes are "
                                   f"{_expected_names()}")
        raise AttributeError(f"type object 'DataType' has no attribute {name!r}")


class DataType(metaclass=_NvfuserDTypeNames):
    """nvFuser's names of the dtypes (`DataType.Float`, `DataType.BFloat16`), so a fusion definition
    written for nvFuser reads as it is; each is the braze dtype of that name. `DataType.Null` (nvFuser's
    "no dtype given", as in `sum(x, dims, dtype=DataType.Null)`) is None."""

    Bool, Int32, Int, Half, BFloat16, Float, Double = bool_, int32, int64, float16, bfloat16, float32, float64
    Index, UInt64, Null = int64, uint64, None


ALL_DTYPES: tuple[DType, ...] = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
                                 float16, bfloat16, float32, float64)
FLOAT_DTYPES: tuple[DType, ...] = tuple(d for d in ALL_DTYPES if d.is_floating)
INT_DTYPES: tuple[DType, ...] = tuple(d for d in ALL_DTYPES if d.is_integer)
_BY_NAME = {d.name: d for d in ALL_DTYPES}
_NUMPY = {d.name: np.dtype(ml_dtypes.bfloat16 if d is bfloat16 else d.name) for d in ALL_DTYPES}
_PYTHON_TYPES = {bool: bool_, int: int64, float: float64}
# The dtype a weak Python scalar takes when it raises a tensor's category (torch and JAX agree).
_WEAK_DEFAULT = {"b": bool_, "i": int64, "f": float32}


def _expected_names() -> str:
    return ", ".join(d.name for d in ALL_DTYPES)


def as_dtype(obj: object) -> DType:
    """Converts a DType, a name, a NumPy dtype or type, a torch dtype or a Python type to a DType."""
    if isinstance(obj, DType):
        return obj
    if obj is None or isinstance(obj, (list, dict, set, tuple)):
        raise UnsupportedError(f"dtype: expected one of {_expected_names()}, got {obj!r}")
    if isinstance(obj, type) and obj in _PYTHON_TYPES:
        return _PYTHON_TYPES[obj]
    if isinstance(obj, str) and obj.removeprefix("torch.") in _BY_NAME:
        return _BY_NAME[obj.removeprefix("torch.")]
    if type(obj).__module__ == "torch":  # a torch.dtype, without importing torch
        return as_dtype(str(obj))
    try:
        return from_numpy(np.dtype(obj))
    except TypeError:
        pass
    raise UnsupportedError(f"dtype: expected one of {_expected_names()}, got {obj!r}")


def from_numpy(dtype: np.dtype) -> DType:
    """The braze dtype of a NumPy dtype; raises UnsupportedError for dtypes braze has no type for."""
    for d in ALL_DTYPES:
        if _NUMPY[d.name] == dtype:
            return d
    raise UnsupportedError(f"dtype: expected one of {_expected_names()}, got {numpy_dtype_text(dtype)}")


def numpy_dtype_text(dtype: np.dtype) -> str:
    """A NumPy dtype as an error names it: one braze has but for its byte order says so, since
    `>f4` is a float32 to whoever wrote it, and braze reads only the machine's own order."""
    if not isinstance(dtype, np.dtype) or dtype.isnative:
        return str(dtype)
    native = dtype.newbyteorder("=")
    if not any(_NUMPY[d.name] == native for d in ALL_DTYPES):
        return str(dtype)
    return f"{dtype} ({native} in the other byte order; .astype({native.name!r}) makes a copy braze reads)"


_SIGNED_BY_SIZE = {1: int8, 2: int16, 4: int32, 8: int64}


def promote_types(a: DType, b: DType) -> DType:
    """Promotes two strong dtypes: the wider of one kind, the floating one across kinds.

    float16 with bfloat16 gives float32, as in torch and JAX; the array API leaves cross-kind
    pairs to the implementation, and braze takes the higher kind's type as JAX does (so uint32
    with float32 is float32, where NumPy gives float64). A signed and an unsigned integer promote
    as in NumPy 2: to the smallest signed type that holds both (uint8 with int8 is int16), and
    uint64 with any signed type, which no integer type holds, to float64.
    """
    if a == b:
        return a
    if _KIND_RANK[a.kind] != _KIND_RANK[b.kind]:
        return a if _KIND_RANK[a.kind] > _KIND_RANK[b.kind] else b
    if {a, b} == {float16, bfloat16}:
        return float32
    if a.kind != b.kind:  # one signed, one unsigned integer
        signed, unsigned = (a, b) if a.kind == "i" else (b, a)
        if signed.itemsize > unsigned.itemsize:
            return signed
        return _SIGNED_BY_SIZE.get(2 * unsigned.itemsize, float64)
    return a if a.itemsize > b.itemsize else b


def result_type(*operands: tuple[DType, bool | int] | tuple[DType, bool | int, bool]) -> DType:
    """The result dtype of an elementwise op over `(dtype, weakness)` operands.

    Weak operands never widen a stronger operand's dtype; they only raise its category (an integer
    tensor times 0.5 is float32). Weakness 0 (False) is a tensor, 1 (True) a typed scalar, 2 a
    Python literal: among scalars alone, a typed scalar input decides over a literal. A weak
    operand marked `(dtype, weakness, True)` is a 0-d torch tensor: where it raises the category it
    brings its own dtype, as in torch (an int64 tensor times a float64 0-d tensor is float64, times
    the Python float 2.0 float32).
    """
    strongest = min(int(operand[1]) for operand in operands)
    strong = [operand[0] for operand in operands if int(operand[1]) == strongest]
    weak = [operand for operand in operands if int(operand[1]) != strongest]
    result = strong[0]
    for d in strong[1:]:
        result = promote_types(result, d)
    zero_dim = [operand[0] for operand in weak if len(operand) > 2 and operand[2]]
    if zero_dim:  # first: a Python number of their category then no longer raises it
        promoted = zero_dim[0]
        for d in zero_dim[1:]:
            promoted = promote_types(promoted, d)
        if _KIND_RANK[promoted.kind] > _KIND_RANK[result.kind]:
            result = promote_types(result, promoted)
    for operand in weak:
        if _KIND_RANK[operand[0].kind] > _KIND_RANK[result.kind]:
            result = _WEAK_DEFAULT[operand[0].category]
    return result


def python_scalar_dtype(value: object) -> DType:
    """The dtype of a Python scalar literal, used when no tensor decides the result type.

    Floats are float32, as in torch and JAX (`where(c, 1.0, 0.0)` is float32)."""
    for py_type in (bool, int, float):  # bool first: True is also an int
        if isinstance(value, py_type):
            return _WEAK_DEFAULT[_PYTHON_TYPES[py_type].kind]
    raise UnsupportedError(f"scalar: expected bool, int or float, got {type(value).__name__}")


def numpy_float_of(dtype: DType) -> DType:
    """The float type NumPy's float ufuncs (np.sqrt, np.exp, np.arctan2) give for an integer or bool
    type: the smallest that holds each of its values exactly (float16 for 8 bits, float32 for 16)."""
    return {1: float16, 2: float32}.get(dtype.itemsize, float64)


def compute_dtype(dtype: DType) -> DType:
    """The type arithmetic is done in: float32 for the half types, the dtype itself otherwise."""
    return float32 if dtype in (float16, bfloat16) else dtype


def finfo(dtype: object) -> ml_dtypes.finfo:
    """The limits of a floating dtype (bfloat16 too), as torch's `finfo` gives them: `.min`, `.max`,
    `.eps`, `.tiny` (`scores.masked_fill(~keep, bz.finfo(scores.dtype).min)`)."""
    target = as_dtype(dtype)
    if not target.is_floating:
        raise UnsupportedError(f"finfo: expected a floating dtype, got {target.name} (bz.iinfo takes integer ones)")
    return ml_dtypes.finfo(target.numpy)


def iinfo(dtype: object) -> np.iinfo:
    """The limits of an integer dtype: `.min`, `.max`, `.bits`."""
    target = as_dtype(dtype)
    if not target.is_integer:
        raise UnsupportedError(f"iinfo: expected an integer dtype, got {target.name} (bz.finfo takes floating ones)")
    return np.iinfo(target.numpy)


def int_bounds(dtype: DType) -> tuple[int, int]:
    """The smallest and largest value of an integer dtype (bool: 0 and 1)."""
    if dtype.is_bool:
        return 0, 1
    bits = dtype.itemsize * 8
    return (0, (1 << bits) - 1) if dtype.is_unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def wrap_int(value: int, dtype: DType) -> int:
    """`value` modulo 2^n into the range of integer `dtype`, as integer arithmetic and casts wrap."""
    lo, hi = int_bounds(dtype)
    return (int(value) - lo) % (hi - lo + 1) + lo


def cast_values(values: np.ndarray, target: DType) -> np.ndarray:
    """`values` converted to `target` as compiled code converts them: integers wrap modulo 2^n; floats
    to integers truncate toward zero and saturate, NaN giving 0 and a negative float 0 of an unsigned
    type (C and NumPy leave those undefined)."""
    if target.is_integer and values.dtype.kind not in "biu":  # floats, bfloat16 among them
        lo, hi = int_bounds(target)
        finite = np.nan_to_num(values.astype(np.float64), nan=0.0)
        truncated = np.clip(np.trunc(finite), float(lo), float(hi))
        # float(hi) of a 64-bit type rounds up to 2^63 or 2^64, past the type: those saturate too
        with np.errstate(all="ignore"):
            return np.where(truncated >= float(hi), target.numpy.type(hi),
                            truncated.astype(target.numpy)).astype(target.numpy)
    with np.errstate(all="ignore"):
        return values.astype(target.numpy)


def finfo_eps(dtype: DType) -> float:
    """Machine epsilon of a floating dtype (for tolerances)."""
    return float(ml_dtypes.finfo(dtype.numpy).eps)
