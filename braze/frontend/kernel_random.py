"""`bz.random`: counter-based random numbers inside `@bz.kernel`s, from the Philox stream of `bz.ops.rand`.

    @bz.kernel
    def noise(out: bz.Array[bz.float32, 1], seed: int, step: int):
        for i in range(out.shape[0]):
            out[i] = bz.random.uniform(seed, i, step)

Each function is stateless: the value depends only on (seed, counter, offset), so any thread can
draw any number, and the CPU and the GPU give the same bits (one Philox4x32-10 definition,
`braze.ops.philox`, behind both code generators). For counter `c >= 0` and offset `o`,

    bz.random.uniform(seed, c, o) == bz.ops.rand((n,), seed=seed, offset=o)[c]    (float32)
    bz.random.normal(seed, c, o)  == bz.ops.randn((n,), seed=seed, offset=o)[c]

that is, word `c % 4` of Philox block `c // 4` (normal: words `2 (c % 2)` and `2 (c % 2) + 1` of
block `c // 2`, Box-Muller in float64). A negative counter takes Python's floor division and
remainder, and the block index's 64 bits as unsigned; seed and offset are taken modulo 2**64.
Give each use its own counters (`2 * i` and `2 * i + 1` for two numbers per index), and a new
offset per step of a simulation for a new stream.

Called outside a kernel, each function is its NumPy reference, elementwise over array counters.
"""

from __future__ import annotations

import numpy as np

from braze import dtypes as dt
from braze.dtypes import DType
from braze.errors import Error, InputError
from braze.frontend import kernel_types as ty
from braze.kir import nodes as k
from braze.lower.random import normal_from_bits, uniform_from_bits
from braze.lower.values import index_op
from braze.ops import philox

_WIDE = dt.int64
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_U64 = 2**64


# --- the NumPy reference -------------------------------------------------------------------------
def _u64(name: str, value) -> int:
    """A seed or offset as its uint64 bits (modulo 2**64)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ty.TypeProblem(f"{name}: expected an integer, got {type(value).__name__}")
    return int(value) % _U64


def _blocks(seed, counter_group: np.ndarray, offset) -> np.ndarray:
    """Philox blocks (..., 4) of counter groups (uint64, any shape) under (seed, offset)."""
    seed, offset = _u64("seed", seed), _u64("offset", offset)
    flat = counter_group.reshape(-1)
    counters = np.empty((flat.size, 4), np.uint32)
    counters[:, 0] = flat & np.uint64(0xFFFFFFFF)
    counters[:, 1] = flat >> np.uint64(32)
    counters[:, 2], counters[:, 3] = offset & 0xFFFFFFFF, offset >> 32
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)
    return philox.philox4x32(counters, key).reshape(*counter_group.shape, 4)


def _split(counter, per_block: int) -> tuple[np.ndarray, np.ndarray]:
    """(block as uint64 bits, position in the block) of int64 counters, with Python's floor division."""
    c = np.asarray(counter)
    if c.dtype.kind not in "iu":
        raise ty.TypeProblem(f"counter: expected an integer, got {c.dtype}")
    c = c.astype(np.int64)
    return np.floor_divide(c, per_block).astype(np.uint64), np.remainder(c, per_block)


def reference_bits(seed, counter, offset=0) -> np.ndarray:
    """The uint32 word of `counter` (int64), as int64 values in [0, 2**32)."""
    group, word = _split(counter, 4)
    block = _blocks(seed, group, offset)
    return np.take_along_axis(block, word[..., None], axis=-1)[..., 0].astype(np.int64)


def reference_uniform(seed, counter, offset=0, dtype=dt.float32):
    """NumPy reference of `bz.random.uniform`."""
    return _scalar_or_array(philox.bits_to_uniform(reference_bits(seed, counter, offset).astype(np.uint32),
                                                   _float_dtype(dtype).numpy), counter)


def reference_normal(seed, counter, offset=0, dtype=dt.float32):
    """NumPy reference of `bz.random.normal`: exact in float32 and float16; in float64 within a few ulps,
    since NumPy's log and cosine are not the kernel's."""
    group, position = _split(counter, 2)
    block = _blocks(seed, group, offset)
    a = np.take_along_axis(block, (2 * position)[..., None], axis=-1)[..., 0]
    b = np.take_along_axis(block, (2 * position + 1)[..., None], axis=-1)[..., 0]
    return _scalar_or_array(philox.bits_to_normal(a, b, _float_dtype(dtype).numpy), counter)


def _scalar_or_array(values: np.ndarray, counter):
    return values[()] if np.ndim(counter) == 0 else values


def _float_dtype(dtype) -> DType:
    try:
        d = dt.as_dtype(dtype)
    except Error:
        raise ty.TypeProblem(f"dtype: expected one of {', '.join(_FLOATS)}, got {dtype!r}") from None
    if d.name not in _FLOATS:
        raise ty.TypeProblem(f"dtype: expected one of {', '.join(_FLOATS)}, got {d.name}")
    return d


# --- Kernel IR ------------------------------------------------------------------------------------
def _int64(name: str, value) -> k.Expr:
    """A seed, counter or offset as int64 bits (an unsigned literal >= 2**63 wraps, as its bits do)."""
    if isinstance(value, bool) or not isinstance(value, (int, k.Expr)):
        raise ty.TypeProblem(f"{name}: expected an integer, got {_describe(value)}")
    if isinstance(value, int):
        if not -2**63 <= value < _U64:
            raise ty.TypeProblem(f"{name}: expected an integer in [-2**63, 2**64), got {value}")
        return k.Const(value - _U64 if value >= 2**63 else value, _WIDE)
    if not value.dtype.is_integer:
        raise ty.TypeProblem(f"{name}: expected an integer, got {value.dtype.name}")
    return ty.as_expr(value, _WIDE)


def _describe(value) -> str:
    return getattr(value, "type_name", None) or type(value).__name__


def _words(seed, counter, offset, per_block: int) -> tuple[k.Expr, k.Expr, k.Expr, k.Expr]:
    seed, counter, offset = _int64("seed", seed), _int64("counter", counter), _int64("offset", offset)
    block = index_op("floordiv", counter, k.Const(per_block, _WIDE))
    position = index_op("remainder", counter, k.Const(per_block, _WIDE))
    return seed, offset, block, position


def kernel_bits(seed, counter, offset=0) -> k.Expr:
    seed, offset, block, word = _words(seed, counter, offset, 4)
    return k.Philox(seed, offset, block, word)


def kernel_uniform(seed, counter, offset=0, dtype=dt.float32) -> k.Expr:
    return uniform_from_bits(kernel_bits(seed, counter, offset), _float_dtype(dtype))


def kernel_normal(seed, counter, offset=0, dtype=dt.float32) -> k.Expr:
    seed, offset, block, position = _words(seed, counter, offset, 2)
    first = index_op("mul", position, k.Const(2, _WIDE))
    second = index_op("add", first, k.Const(1, _WIDE))
    a, b = k.Philox(seed, offset, block, first), k.Philox(seed, offset, block, second)
    return normal_from_bits(a, b, _float_dtype(dtype))


# --- the user's names -----------------------------------------------------------------------------
class RandomFunction:
    """`bz.random.<kind>(seed, counter, offset=0, dtype=bz.float32)` (bits takes no dtype)."""

    def __init__(self, kind: str, reference, build, doc: str) -> None:
        self.kind, self.reference, self.build = kind, reference, build
        self.__name__, self.__doc__ = kind, doc

    def __call__(self, *args, **kwargs):
        try:
            return self.reference(*args, **kwargs)
        except ty.TypeProblem as problem:
            raise InputError(f"bz.random.{self.kind}: {problem}") from None

    def __repr__(self) -> str:
        return f"bz.random.{self.kind}"


class _RandomNamespace:
    """`bz.random.uniform`, `bz.random.normal` and `bz.random.bits` (see braze.frontend.kernel_random)."""

    uniform = RandomFunction("uniform", reference_uniform, kernel_uniform,
                             "Uniform in [0, 1) (float32 unless dtype says): element `counter` of bz.ops.rand's "
                             "stream (seed, offset).")
    normal = RandomFunction("normal", reference_normal, kernel_normal,
                            "Standard normal (float32 unless dtype says): element `counter` of bz.ops.randn's "
                            "stream (seed, offset).")
    bits = RandomFunction("bits", reference_bits, kernel_bits,
                          "The raw 32-bit Philox word `counter` of the stream (seed, offset), as an int64 in "
                          "[0, 2**32).")

    def __repr__(self) -> str:
        return "bz.random"


random = _RandomNamespace()
