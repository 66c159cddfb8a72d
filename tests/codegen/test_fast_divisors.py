"""The prelude's division by a kernel-invariant divisor (BzDivisor: a multiplier and shift computed once
a thread, braze/codegen/prelude.cuh) over the whole unsigned 32-bit range: a Python model of its lines,
operation by operation, against exact integer arithmetic; the prelude's own text compiled with g++
(tests/cuda_on_cpu.h stands in for the CUDA intrinsics) over chosen and generated divisors and
dividends; and NVRTC compiling it."""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.codegen.cuda import PRELUDE
from braze.compile import nvrtc

U32 = 2**32
EDGES = [0, 1, 2, 3, 5, 7, 8, 255, 256, 257, 65535, 65536, 65537, 2**31 - 1, 2**31, 2**31 + 1,
         2**32 - 3, 2**32 - 2, 2**32 - 1]
# Divisors whose double estimate of floor(excess * 2^32 / d) rounds up to the next integer: the
# correction step of bz_divisor is what makes their multiplier right.
ONE_OFF = [2163417524, 2385846974, 3347060973, 2446384990, 4036555567]
u32 = st.one_of(st.sampled_from(EDGES + ONE_OFF), st.integers(0, U32 - 1), st.integers(0, 4096))


# --- a model of the prelude's lines --------------------------------------------------------------------
def clz(x: int) -> int:
    return 32 - x.bit_length()


def bz_divisor(d: int) -> tuple[int, int, int]:
    """(magic, shift, divisor) as bz_divisor computes them: Python floats are IEEE doubles rounding to
    nearest, as the GPU's DMUL and __drcp_rn."""
    shift = 32 - clz((d - 1) % U32)
    excess = ((1 << shift) - d) % U32
    rcp = 1.0 / float(d) if d else float("inf")
    estimate = float(excess) * 4294967296.0 * rcp
    q = int(estimate) if estimate == estimate else 0  # 0 * inf (d = 0): NaN, converted to 0
    r = (excess << 32) - q * d
    q = q - 1 if r < 0 else q + 1 if r >= d else q
    return (0 if d == 0 else (q + 1) % U32), shift, d


def bz_divide(n: int, divisor: tuple[int, int, int]) -> int:
    magic, shift, _ = divisor
    total = ((n * magic) >> 32) + n  # 33 bits
    return (total >> min(shift, 32)) % U32


def quotient_and_remainder(n: int, d: int) -> tuple[int, int]:
    divisor = bz_divisor(d)
    q = bz_divide(n, divisor)
    return q, 0 if d == 0 else (n - q * d) % U32


def exact_magic(d: int) -> int:
    """Granlund and Montgomery's multiplier less 2^32: floor(2^32 (2^l - d) / d) + 1, l = ceil(log2 d)."""
    shift = (d - 1).bit_length()
    return (U32 * ((1 << shift) - d)) // d + 1


@settings(max_examples=400, deadline=None)
@given(u32, u32)
def test_the_model_divides_as_integers_do(n, d):
    assert quotient_and_remainder(n, d) == ((n // d, n % d) if d else (0, 0))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, U32 - 1))
def test_the_model_multiplier_is_the_exact_one(d):
    magic, shift, _ = bz_divisor(d)
    assert magic == exact_magic(d) < U32 and shift == (d - 1).bit_length()


@pytest.mark.parametrize("d", ONE_OFF)
def test_some_divisors_need_the_correction_step(d):
    excess = U32 - d  # all above 2^31: l = 32
    estimate = int(float(excess) * 4294967296.0 * (1.0 / d))
    assert estimate == (excess << 32) // d + 1 and bz_divisor(d)[0] == exact_magic(d)


def test_the_multiplier_of_many_divisors_at_once():
    """Every divisor below 2^16, those around each power of two and 2^14 random ones."""
    rng = np.random.default_rng(5)
    powers = [1 << p for p in range(1, 33)]
    divisors = set(range(1, 1 << 16)) | {p + k for p in powers for k in range(-3, 4)} | set(ONE_OFF)
    divisors |= {int(d) for d in rng.integers(1, U32, 1 << 14)}
    divisors = sorted(d for d in divisors if 0 < d < U32)
    assert [bz_divisor(d)[0] for d in divisors] == [exact_magic(d) for d in divisors]


# --- the prelude's text, compiled with g++ -----------------------------------------------------------------
_CHECK = r'''
extern "C" void divide(unsigned n, unsigned d, unsigned* out) {
  const BzDivisor divisor = bz_divisor(d);
  out[0] = bz_divide(n, divisor);
  out[1] = (unsigned)bz_fast_remainder((int)n, divisor);
  out[2] = divisor.magic;
}
// Divisions by each divisor of dividends at its multiples' edges, at the range's ends and spread
// over it: the count of wrong quotients, remainders or multipliers.
extern "C" long long sweep(const unsigned* divisors, long long count) {
  long long wrong = 0;
  for (long long i = 0; i < count; ++i) {
    const unsigned d = divisors[i];
    const BzDivisor divisor = bz_divisor(d);
    if (d != 0u) {
      unsigned l = 0; while (l < 32 && (1ull << l) < d) ++l;
      const unsigned long long exact = ((((unsigned __int128)1 << 32) * ((1ull << l) - d)) / d) + 1;
      wrong += divisor.magic != exact || divisor.shift != l;
    }
    unsigned long long samples[64];
    int m = 0;
    for (unsigned long long k : {0ull, 1ull, 2ull, 3ull}) samples[m++] = k;
    for (unsigned long long k : {1ull, 2ull, 3ull, 0xffffull}) {
      const unsigned long long multiple = (unsigned long long)d * k;
      samples[m++] = multiple; samples[m++] = multiple - 1; samples[m++] = multiple + 1;
    }
    for (unsigned long long k : {0x7fffffffull, 0x80000000ull, 0xfffffffeull, 0xffffffffull}) samples[m++] = k;
    if (d != 0u) {
      const unsigned long long last = 0xffffffffull / d * d;
      samples[m++] = last; samples[m++] = last - 1; samples[m++] = last + (d - 1);
    }
    unsigned long long x = 0x9e3779b97f4a7c15ull * (i + 1);
    while (m < 64) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; samples[m++] = x; }
    for (int s = 0; s < m; ++s) {
      const unsigned n = (unsigned)samples[s];
      const unsigned q = bz_divide(n, divisor), r = (unsigned)bz_fast_remainder((int)n, divisor);
      wrong += d == 0u ? (q != 0u || r != 0u) : (q != n / d || r != n % d);
    }
  }
  return wrong;
}
'''


@pytest.fixture(scope="module")
def compiled():
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    header = Path(__file__).parents[1] / "cuda_on_cpu.h"
    text = f'#include "{header.name}"\n{PRELUDE}\n{_CHECK}'
    folder = Path(tempfile.mkdtemp(prefix="braze-fast-divisors-"))
    library = folder / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.so"
    source = library.with_suffix(".cpp")
    source.write_text(text)
    subprocess.run(["g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-w", f"-I{header.parent}", "-o", str(library),
                    str(source)], check=True)
    lib = ctypes.CDLL(str(library))
    lib.divide.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint)]
    lib.sweep.argtypes, lib.sweep.restype = [ctypes.c_void_p, ctypes.c_longlong], ctypes.c_longlong
    yield lib
    shutil.rmtree(folder, ignore_errors=True)


def test_the_prelude_divides_every_divisor_at_its_edges(compiled):
    rng = np.random.default_rng(11)
    powers = np.array([1 << p for p in range(33)], dtype=np.int64)
    divisors = np.unique(np.concatenate([np.arange(0, 1 << 14), (powers[:, None] + np.arange(-2, 3)).ravel(),
                                         rng.integers(0, U32, 1 << 14), EDGES, ONE_OFF]))
    divisors = divisors[(divisors >= 0) & (divisors < U32)].astype(np.uint32)
    assert compiled.sweep(divisors.ctypes.data, len(divisors)) == 0


@settings(max_examples=300, deadline=None)
@given(u32, u32)
def test_the_prelude_and_the_model_agree_with_integer_division(compiled, n, d):
    out = (ctypes.c_uint * 3)()
    compiled.divide(n, d, out)
    assert (out[0], out[1]) == quotient_and_remainder(n, d) == ((n // d, n % d) if d else (0, 0))
    assert out[2] == bz_divisor(d)[0]


@pytest.mark.skipif(not nvrtc.available(), reason="needs NVRTC")
def test_the_prelude_divisor_compiles_with_nvrtc():
    source = PRELUDE + r'''
extern "C" __global__ void divide(const unsigned d, const int* n, int* q, int* r, int count) {
  const BzDivisor divisor = bz_divisor(d);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    q[i] = bz_fast_floordiv(n[i], divisor);
    r[i] = bz_fast_remainder(n[i], divisor);
  }
}'''
    assert nvrtc.compile_ptx(source, "divide", "sm_90")
