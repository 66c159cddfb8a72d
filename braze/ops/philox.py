"""The braze random stream: counter-based Philox4x32-10, the NumPy reference every backend must match.

Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", Random123) maps a
128-bit counter and a 64-bit key to 128 random bits. Being counter-based, element `i` of a tensor
can be computed on its own, which is what lets the CUDA and LLVM backends generate it per thread.

Per-element mapping (all words uint32; `lo32(x) = x & 0xffffffff`, `hi32(x) = x >> 32`):

    key          = (lo32(seed), hi32(seed))
    block(g)     = philox4x32(counter=(lo32(g), hi32(g), lo32(offset), hi32(offset)), key)
    uniform_bits : word i = block(i // 4)[i % 4]
    uniform      : w = word i; m = UNIFORM_BITS[dtype]; value = (w >> (32 - m)) * 2**-m
                   (exact in every dtype, so the result lies in [0, 1) and is never 1.0)
    normal       : out = block(i // 2); k = i % 2; a = out[2k]; b = out[2k + 1]
                   u1 = ((a >> 8) + 1) * 2**-24   in (0, 1], so log(u1) is finite
                   u2 = (b >> 8) * 2**-24         in [0, 1)
                   z  = sqrt(-2 ln u1) * cos(2 pi u2)   (Box-Muller, cosine branch only)
                   computed in float64, then cast to the dtype.

The offset is the high 64 bits of the counter, so each offset owns 2**64 counter groups: a caller
advances `offset` by 1 per call to get an independent stream. `words_needed` says how many groups
one call consumes, for callers that would rather pack several calls into one offset.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from braze.errors import InputError, UnsupportedError

PHILOX_M0 = 0xD2511F53  # multiplies counter word 0
PHILOX_M1 = 0xCD9E8D57  # multiplies counter word 2
PHILOX_W0 = 0x9E3779B9  # Weyl increment of key word 0 (golden ratio)
PHILOX_W1 = 0xBB67AE85  # Weyl increment of key word 1 (sqrt(3) - 1)

_MASK32 = 0xFFFFFFFF
_U64_LIMIT = 2**64

# Bits of a word kept per dtype: mantissa bits + 1, so every value is exactly representable.
# float64 takes 24 bits from one word (not 53 from two) so that every backend computes it alike.
UNIFORM_BITS: dict[str, int] = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 24}

# Elements produced per counter group (one Philox block of four words).
_ELEMENTS_PER_GROUP: dict[str, int] = {"uniform": 4, "normal": 2}

_SUPPORTED_DTYPES = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float32": np.float32,
    "float64": np.float64,
}


def _mulhilo(m: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) 32-bit halves of the 64-bit product m * x; x holds uint32 values in uint64."""
    product = np.uint64(m) * x
    return product >> np.uint64(32), product & np.uint64(_MASK32)


def philox4x32(counters: np.ndarray, key: np.ndarray, rounds: int = 10) -> np.ndarray:
    """Philox4x32 with `rounds` rounds: uint32 counters (N, 4) and key (2,) or (N, 2) -> uint32 (N, 4)."""
    counters = np.asarray(counters, dtype=np.uint32)
    key = np.asarray(key, dtype=np.uint32)
    if counters.ndim != 2 or counters.shape[1] != 4:
        raise InputError(f"philox4x32 counters: expected shape (N, 4), got {counters.shape}")
    if key.shape not in ((2,), (counters.shape[0], 2)):
        raise InputError(f"philox4x32 key: expected shape (2,) or ({counters.shape[0]}, 2), got {key.shape}")
    # uint64 lanes so the 32x32 products are exact; every stored value stays below 2**32.
    c0, c1, c2, c3 = (counters[:, j].astype(np.uint64) for j in range(4))
    k0, k1 = key[..., 0].astype(np.uint64), key[..., 1].astype(np.uint64)
    mask = np.uint64(_MASK32)
    for r in range(rounds):
        if r > 0:  # the key is bumped between rounds, never after the last
            k0 = (k0 + np.uint64(PHILOX_W0)) & mask
            k1 = (k1 + np.uint64(PHILOX_W1)) & mask
        hi0, lo0 = _mulhilo(PHILOX_M0, c0)
        hi1, lo1 = _mulhilo(PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


def _check_u64(name: str, value: int) -> int:
    """Reject anything but a Python int in [0, 2**64), naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name}: expected an int in [0, 2**64), got {type(value).__name__} {value!r}")
    if not 0 <= int(value) < _U64_LIMIT:
        raise InputError(f"{name}: expected an int in [0, 2**64), got {int(value)}")
    return int(value)


def _check_count(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise InputError(f"element count: expected a non-negative int, got {n!r}")
    return int(n)


def _blocks(groups: int, seed: int, offset: int) -> np.ndarray:
    """Philox blocks for counter groups 0..groups-1 of (seed, offset): uint32 (groups, 4)."""
    seed, offset = _check_u64("seed", seed), _check_u64("offset", offset)
    g = np.arange(groups, dtype=np.uint64)
    counters = np.empty((groups, 4), dtype=np.uint32)
    counters[:, 0] = g & np.uint64(_MASK32)
    counters[:, 1] = g >> np.uint64(32)
    counters[:, 2] = offset & _MASK32
    counters[:, 3] = offset >> 32
    key = np.array([seed & _MASK32, seed >> 32], dtype=np.uint32)
    return philox4x32(counters, key)


def words_needed(n: int, kind: str) -> int:
    """Counter groups consumed by `n` elements of `kind` ('uniform': ceil(n/4), 'normal': ceil(n/2))."""
    if kind not in _ELEMENTS_PER_GROUP:
        raise InputError(f"kind: expected one of {sorted(_ELEMENTS_PER_GROUP)}, got {kind!r}")
    return -(-_check_count(n) // _ELEMENTS_PER_GROUP[kind])


def uniform_bits(n: int, seed: int, offset: int) -> np.ndarray:
    """The first `n` uint32 words of the stream (seed, offset): word i = block(i // 4)[i % 4]."""
    n = _check_count(n)
    return _blocks(words_needed(n, "uniform"), seed, offset).reshape(-1)[:n]


def _dtype_name(dtype: object) -> str:
    name = np.dtype(dtype).name
    if name not in _SUPPORTED_DTYPES:
        raise UnsupportedError(f"random dtype: expected one of {sorted(_SUPPORTED_DTYPES)}, got {name}")
    return name


def bits_to_uniform(words: np.ndarray, dtype: object) -> np.ndarray:
    """Map uint32 words to `dtype` values in [0, 1): keep the top m bits, scale by 2**-m, exactly."""
    name = _dtype_name(dtype)
    m = UNIFORM_BITS[name]
    kept = np.asarray(words, dtype=np.uint32) >> np.uint32(32 - m)
    # m <= 24, so the float64 product is exact and so is the cast: the value can never round to 1.0.
    return (kept.astype(np.float64) * 2.0**-m).astype(_SUPPORTED_DTYPES[name])


def uniform(shape: tuple[int, ...], dtype: object, seed: int, offset: int) -> np.ndarray:
    """A tensor of `shape` and `dtype` uniform in [0, 1), element i from word i of the stream."""
    n = _check_count(math.prod(shape))
    return bits_to_uniform(uniform_bits(n, seed, offset), dtype).reshape(shape)


def bits_to_normal(a: np.ndarray, b: np.ndarray, dtype: object) -> np.ndarray:
    """Box-Muller (cosine branch) on word pairs (a, b): standard normal values of `dtype`."""
    name = _dtype_name(dtype)
    # float64 for every dtype: log and cos of different math libraries then agree after rounding to
    # the output dtype, so every backend gives the same numbers for a seed.
    compute = np.float64
    a = np.asarray(a, dtype=np.uint32)
    b = np.asarray(b, dtype=np.uint32)
    scale = compute(2.0**-24)
    u1 = ((a >> np.uint32(8)) + np.uint32(1)).astype(compute) * scale  # (0, 1]: log stays finite
    u2 = (b >> np.uint32(8)).astype(compute) * scale  # [0, 1)
    z = np.sqrt(compute(-2.0) * np.log(u1)) * np.cos(compute(2.0 * math.pi) * u2)
    return z.astype(_SUPPORTED_DTYPES[name])


def normal(shape: tuple[int, ...], dtype: object, seed: int, offset: int) -> np.ndarray:
    """A standard-normal tensor of `shape` and `dtype`; element i uses words (2k, 2k+1) of block(i // 2)."""
    n = _check_count(math.prod(shape))
    pairs = _blocks(words_needed(n, "normal"), seed, offset).reshape(-1, 2)[:n]
    return bits_to_normal(pairs[:, 0], pairs[:, 1], dtype).reshape(shape)


def check_seed_offset(seed: int, offset: int) -> None:
    """Raises InputError unless seed and offset are ints in [0, 2**64)."""
    _check_u64("seed", seed)
    _check_u64("offset", offset)
