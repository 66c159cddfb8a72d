"""Tests of the Philox4x32-10 reference stream: known answers, a scalar oracle, the element mapping."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.errors import InputError
from braze.ops.philox import (
    bits_to_uniform,
    normal,
    philox4x32,
    uniform,
    uniform_bits,
    words_needed,
)

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
M32 = 0xFFFFFFFF

# Philox4x32-10 known answers from Random123's kat_vectors: (counter, key, expected output).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((M32, M32, M32, M32), (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def scalar_philox(ctr: tuple[int, ...], key: tuple[int, int], rounds: int = 10) -> tuple[int, ...]:
    """One Philox4x32 block in plain Python ints: an oracle independent of NumPy's integer rules."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
    return c0, c1, c2, c3


def stream_block(group: int, seed: int, offset: int) -> tuple[int, ...]:
    """Block `group` of the braze stream, built from the documented counter layout."""
    ctr = (group & M32, group >> 32, offset & M32, offset >> 32)
    return scalar_philox(ctr, (seed & M32, seed >> 32))


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_known_answers(ctr, key, expected):
    out = philox4x32(np.array([ctr], dtype=np.uint32), np.array(key, dtype=np.uint32))
    assert out.dtype == np.uint32 and out.shape == (1, 4)
    assert tuple(int(x) for x in out[0]) == expected
    assert scalar_philox(ctr, key) == expected


def test_known_answers_batched_with_per_row_keys():
    ctrs = np.array([c for c, _, _ in KAT], dtype=np.uint32)
    keys = np.array([k for _, k, _ in KAT], dtype=np.uint32)
    np.testing.assert_array_equal(philox4x32(ctrs, keys), np.array([e for _, _, e in KAT], dtype=np.uint32))


u32 = st.integers(0, M32)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(u32, u32, u32, u32), min_size=1, max_size=8), st.tuples(u32, u32), st.integers(1, 12)
)
def test_vectorised_matches_scalar(ctrs, key, rounds):
    out = philox4x32(np.array(ctrs, dtype=np.uint32), np.array(key, dtype=np.uint32), rounds=rounds)
    assert [tuple(int(x) for x in row) for row in out] == [scalar_philox(c, key, rounds) for c in ctrs]


def test_uniform_bits_mapping():
    seed, offset = 0x0123456789ABCDEF, 0xFEDCBA9876543210
    expected = [w for g in range(3) for w in stream_block(g, seed, offset)][:10]
    bits = uniform_bits(10, seed, offset)
    assert bits.dtype == np.uint32
    assert [int(w) for w in bits] == expected


def test_large_group_index_uses_high_counter_word():
    # A group past 2**32 is too large to materialise through uniform_bits; check the layout directly.
    g = 2**32 + 1
    ctr = np.array([[g & M32, g >> 32, 3, 0]], dtype=np.uint32)
    out = philox4x32(ctr, np.array([7, 0], dtype=np.uint32))
    assert tuple(int(x) for x in out[0]) == stream_block(g, 7, 3)


def test_determinism_and_independence():
    a = uniform_bits(64, 5, 9)
    np.testing.assert_array_equal(a, uniform_bits(64, 5, 9))
    assert not np.array_equal(a, uniform_bits(64, 5, 10))
    assert not np.array_equal(a, uniform_bits(64, 6, 9))
    assert not np.array_equal(a, uniform_bits(64, 5 + 2**32, 9))  # high seed word matters
    assert not np.array_equal(a, uniform_bits(64, 5, 9 + 2**32))  # high offset word matters


@pytest.mark.parametrize("k", [0, 1, 3, 4, 5, 17])
def test_prefix_property(k):
    np.testing.assert_array_equal(uniform_bits(k, 1, 2), uniform_bits(40, 1, 2)[:k])
    for dtype in DTYPES:
        np.testing.assert_array_equal(uniform((k,), dtype, 1, 2), uniform((40,), dtype, 1, 2)[:k])
        np.testing.assert_array_equal(normal((k,), dtype, 1, 2), normal((40,), dtype, 1, 2)[:k])


def test_words_needed():
    assert [words_needed(n, "uniform") for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    assert [words_needed(n, "normal") for n in (0, 1, 2, 3)] == [0, 1, 1, 2]


@pytest.mark.parametrize("dtype", DTYPES)
def test_uniform_range_and_moments(dtype):
    u = uniform((250, 400), dtype, 42, 0)
    assert u.dtype == np.dtype(dtype) and u.shape == (250, 400)
    v = u.astype(np.float64)
    assert v.min() >= 0.0 and v.max() < 1.0
    assert abs(v.mean() - 0.5) < 0.01
    assert abs(v.var() - 1 / 12) < 0.005


@pytest.mark.parametrize("dtype", DTYPES)
def test_uniform_value_formula(dtype):
    m = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 24}[np.dtype(dtype).name]
    words = uniform_bits(16, 3, 4)
    expected = [(int(w) >> (32 - m)) * 2.0**-m for w in words]
    assert uniform((4, 4), dtype, 3, 4).astype(np.float64).ravel().tolist() == expected


@pytest.mark.parametrize("dtype", DTYPES)
def test_uniform_max_word_stays_below_one(dtype):
    top = bits_to_uniform(np.array([M32, 0], dtype=np.uint32), dtype).astype(np.float64)
    assert top[0] < 1.0 and top[1] == 0.0


def scalar_normal(a: int, b: int) -> float:
    """Box-Muller on one word pair, per the module docstring, in float64."""
    u1 = ((a >> 8) + 1) * 2.0**-24
    u2 = (b >> 8) * 2.0**-24
    return float(np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2))


def test_normal_mapping():
    seed, offset = 11, 13
    words = [w for g in range(3) for w in stream_block(g, seed, offset)]
    expected = [scalar_normal(words[2 * i], words[2 * i + 1]) for i in range(5)]
    np.testing.assert_allclose(normal((5,), np.float64, seed, offset), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(normal((5,), np.float32, seed, offset), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_normal_moments(dtype):
    z = normal((100_000,), dtype, 7, 1)
    assert z.dtype == np.dtype(dtype)
    v = z.astype(np.float64)
    assert np.isfinite(v).all()
    assert abs(v.mean()) < 0.02
    assert abs(v.std() - 1.0) < 0.02


def test_extreme_seed_and_offset_accepted():
    assert uniform_bits(4, 2**64 - 1, 2**64 - 1).shape == (4,)


def test_negative_seed_rejected():
    with pytest.raises(InputError, match=r"seed: expected an int in \[0, 2\*\*64\), got -1"):
        uniform_bits(4, -1, 0)


def test_offset_too_large_rejected():
    message = r"offset: expected an int in \[0, 2\*\*64\), got 18446744073709551616"
    with pytest.raises(InputError, match=message):
        normal((4,), np.float32, 0, 2**64)
