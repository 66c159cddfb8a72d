"""Loop kernels over unsigned integers: integer hashes in uint32 and uint64 (Wang, xorshift, PCG) as
simulation and graphics codes write them, checked against the same arithmetic in NumPy's unsigned
types on the CPU backend, and their CUDA compiled with NVRTC."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze.compile import nvrtc


@bz.kernel
def wang_hash(keys: bz.Array[bz.uint32, 1], seed: bz.uint32, out: bz.Array[bz.uint32, 1]):
    for i in range(keys.shape[0]):
        h = keys[i] ^ seed
        h = (h ^ 61) ^ (h >> 16)
        h = h * 9
        h = h ^ (h >> 4)
        h = h * 0x27D4EB2D
        out[i] = (h ^ (h >> 15)) & 0xFFFFFFFF


def wang_hash_numpy(keys: np.ndarray, seed: int) -> np.ndarray:
    u = np.uint32
    h = keys ^ u(seed)
    h = (h ^ u(61)) ^ (h >> u(16))
    h = h * u(9)
    h = h ^ (h >> u(4))
    h = h * u(0x27D4EB2D)
    return h ^ (h >> u(15))


@bz.kernel
def xorshift_steps(state: bz.Array[bz.uint32, 1], steps: int):
    for i in range(state.shape[0]):
        x = state[i]
        for _ in range(steps):
            x ^= x << 13
            x ^= x >> 17
            x ^= x << 5
        state[i] = x


@bz.kernel
def pcg32(state: bz.Array[bz.uint64, 1], out: bz.Array[bz.uint32, 1]):
    for i in range(state.shape[0]):
        old = state[i]
        state[i] = old * 6364136223846793005 + 1442695040888963407
        xorshifted = bz.uint32(((old >> 18) ^ old) >> 27)
        rot = bz.uint32(old >> 59)
        out[i] = (xorshifted >> rot) | (xorshifted << ((-rot) & 31))


def _keys(n: int) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)


def test_wang_hash_matches_numpy_uint32():
    keys = _keys(1000)
    out = np.zeros_like(keys)
    wang_hash(keys, 0xDEADBEEF, out)
    np.testing.assert_array_equal(out, wang_hash_numpy(keys, 0xDEADBEEF))


def test_xorshift_matches_numpy_uint32():
    state = _keys(257) | np.uint32(1)
    want = state.copy()
    for _ in range(5):
        want ^= want << np.uint32(13)
        want ^= want >> np.uint32(17)
        want ^= want << np.uint32(5)
    xorshift_steps(state, 5)
    np.testing.assert_array_equal(state, want)


def test_pcg32_matches_numpy_uint64():
    state = np.arange(100, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # seeds past 2**63 too
    before = state.copy()
    out = np.zeros(100, np.uint32)
    pcg32(state, out)
    with np.errstate(over="ignore"):
        advanced = before * np.uint64(6364136223846793005) + np.uint64(1442695040888963407)
    xorshifted = (((before >> np.uint64(18)) ^ before) >> np.uint64(27)).astype(np.uint32)
    rot = (before >> np.uint64(59)).astype(np.uint32)
    np.testing.assert_array_equal(state, advanced)
    np.testing.assert_array_equal(out, (xorshifted >> rot) | (xorshifted << ((-rot) & np.uint32(31))))


def test_uint8_images_compare_and_divide_unsigned():
    @bz.kernel
    def invert_bright(a: bz.Array[bz.uint8, 2], out: bz.Array[bz.uint8, 2]):
        for i, j in bz.ndrange(a.shape[0], a.shape[1]):
            out[i, j] = 255 - a[i, j] if a[i, j] > 128 else a[i, j] // 3

    a = np.random.default_rng(1).integers(0, 256, (9, 13)).astype(np.uint8)
    out = np.zeros_like(a)
    invert_bright(a, out)
    np.testing.assert_array_equal(out, np.where(a > 128, 255 - a, a // 3))


def test_unsigned_atomics_wrap_and_compare_unsigned():
    @bz.kernel
    def totals(a: bz.Array[bz.uint32, 1], out: bz.Array[bz.uint32, 1]):
        for i in range(a.shape[0]):
            bz.atomic_add(out[0], a[i])
            bz.atomic_max(out[1], a[i])

    a = np.array([5, 0xFFFFFFF0, 3], np.uint32)
    out = np.zeros(2, np.uint32)
    totals(a, out)
    np.testing.assert_array_equal(out, [(5 + 0xFFFFFFF0 + 3) % 2**32, 0xFFFFFFF0])


def test_out_of_range_literals_and_scalars_are_errors():
    @bz.kernel
    def too_wide(a: bz.Array[bz.uint32, 1]):
        for i in range(a.shape[0]):
            a[i] = a[i] * 0x1_0000_0000

    with pytest.raises(bz.KernelTypeError, match=r"mul: the Python int 4294967296 is out of range for uint32"):
        too_wide(np.zeros(3, np.uint32))
    with pytest.raises(bz.InputError, match="seed.*-1.*uint32"):
        wang_hash(_keys(3), -1, np.zeros(3, np.uint32))


def test_a_shift_keeps_its_left_operands_type():
    # As in C, Warp and Taichi: a uint64 shifted by an int64 loop index is uint64 (NumPy's promotion of
    # the pair is float64, which has no shift).
    @bz.kernel
    def bit_count(a: bz.Array[bz.uint64, 1], out: bz.Array[bz.uint64, 1]):
        for i in range(a.shape[0]):
            for k in range(64):
                out[i] += (a[i] >> k) & 1

    a = np.array([0, 1, 2**63 + 5, 2**64 - 1], np.uint64)
    out = np.zeros(4, np.uint64)
    bit_count(a, out)
    np.testing.assert_array_equal(out, [bin(int(v)).count("1") for v in a])


def test_a_uint64_and_an_int64_in_a_bitwise_op_say_what_to_convert():
    @bz.kernel
    def masked(a: bz.Array[bz.uint64, 1], out: bz.Array[bz.uint64, 1]):
        for i in range(a.shape[0]):
            for k in range(64):
                out[i] += a[i] & k

    with pytest.raises(bz.KernelTypeError, match=r"bitwise_and: expected bool or integer operands, and uint64 and "
                                                 r"int64 promote to float64 \(as in NumPy\); convert one first, e.g. "
                                                 r"bz.uint64\(...\)"):
        masked(np.zeros(3, np.uint64), np.zeros(3, np.uint64))


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
@pytest.mark.parametrize("kernel, args", [
    (wang_hash, lambda: (_keys(8), 3, np.zeros(8, np.uint32))),
    (xorshift_steps, lambda: (_keys(8), 2)),
    (pcg32, lambda: (np.arange(8, dtype=np.uint64), np.zeros(8, np.uint32))),
], ids=["wang", "xorshift", "pcg32"])
def test_unsigned_hashes_compile_with_nvrtc(kernel, args):
    source = kernel.cuda_source(*args())
    assert "unsigned" in source.body
    assert nvrtc.compile_cubin(source.text, source.functions[0], "sm_90")
