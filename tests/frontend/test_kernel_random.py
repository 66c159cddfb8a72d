"""`bz.random` inside `@bz.kernel`s on the CPU: the bits of Philox4x32-10 word for word (against a plain
Python Philox), the same stream as `bz.ops.rand`/`randn`, statistics of a million draws, and a Monte
Carlo estimate of pi against NumPy. tests/cuda/test_loop_kernels.py runs the same kernels on a GPU
(the `random` case of tests/kernel_cases.py) against these CPU results."""

from __future__ import annotations

import numpy as np
import pytest
from fuzz_scale import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz

M32 = 0xFFFFFFFF


def scalar_philox(ctr: tuple[int, ...], key: tuple[int, int]) -> tuple[int, ...]:
    """Philox4x32-10 in plain Python ints (Random123's definition), independent of NumPy and of braze."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
    return c0, c1, c2, c3


def python_word(seed: int, counter: int, offset: int) -> int:
    """Word `counter` of the stream: block counter // 4 (its 64 bits unsigned), word counter % 4."""
    block, word = (counter // 4) % 2**64, counter % 4
    seed, offset = seed % 2**64, offset % 2**64
    return scalar_philox((block & M32, block >> 32, offset & M32, offset >> 32), (seed & M32, seed >> 32))[word]


@bz.kernel
def draws(counters: bz.Array[bz.int64, 1], bits: bz.Array[bz.int64, 1], uniform: bz.Array[bz.float32, 1],
          normal: bz.Array[bz.float32, 1], wide: bz.Array[bz.float64, 1], seed: int, offset: int):
    for i in range(counters.shape[0]):
        c = counters[i]
        bits[i] = bz.random.bits(seed, c, offset)
        uniform[i] = bz.random.uniform(seed, c, offset)
        normal[i] = bz.random.normal(seed, c, offset=offset)
        wide[i] = bz.random.uniform(seed, c, offset, dtype=bz.float64)


def run_draws(counters: np.ndarray, seed: int, offset: int) -> list[np.ndarray]:
    n = counters.size
    out = [np.zeros(n, np.int64), np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n)]
    draws(counters, *out, seed, offset)
    return out


int64s = st.integers(-2**63, 2**63 - 1)


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(int64s, min_size=1, max_size=20), int64s, int64s)
def test_kernel_bits_are_philox4x32_10_word_for_word(counters, seed, offset):
    bits, uniform, normal, wide = run_draws(np.array(counters, np.int64), seed, offset)
    expected = [python_word(seed, c, offset) for c in counters]
    assert bits.tolist() == expected
    # uniform: the top 24 bits, scaled by 2**-24, in float32 and float64 alike
    np.testing.assert_array_equal(uniform, np.array([(w >> 8) * 2.0**-24 for w in expected], np.float32))
    np.testing.assert_array_equal(wide, np.array([(w >> 8) * 2.0**-24 for w in expected]))
    np.testing.assert_array_equal(normal, bz.random.normal(seed, np.array(counters), offset))


def test_the_stream_is_that_of_bz_ops_rand_and_randn():
    n = 4099
    counters = np.arange(n, dtype=np.int64)
    _, uniform, normal, _ = run_draws(counters, 12345, 3)
    with bz.Fusion() as f:
        f.add_output(bz.ops.rand((n,), seed=12345, offset=3))
        f.add_output(bz.ops.randn((n,), seed=12345, offset=3))
    rand, randn = f.execute([])
    np.testing.assert_array_equal(uniform, rand)
    np.testing.assert_array_equal(normal, randn)


def test_python_calls_are_the_numpy_reference():
    assert bz.random.uniform(7, 5) == bz.random.uniform(7, np.arange(8))[5]
    assert bz.random.bits(7, 5, 2) == python_word(7, 5, 2)
    assert bz.random.uniform(7, 5, dtype=np.float64).dtype == np.float64
    with pytest.raises(bz.InputError, match="counter: expected an integer"):
        bz.random.uniform(7, 1.5)


@bz.kernel
def million(u: bz.Array[bz.float32, 1], z: bz.Array[bz.float32, 1], seed: int):
    for i in range(u.shape[0]):
        u[i] = bz.random.uniform(seed, i)
        z[i] = bz.random.normal(seed, i)


def test_a_million_draws_have_the_moments_of_their_distributions():
    n = 1 << 20
    u, z = np.zeros(n, np.float32), np.zeros(n, np.float32)
    million(u, z, 2024)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 2e-3 and abs(u.var() - 1 / 12) < 2e-3
    assert abs(z.mean()) < 5e-3 and abs(z.var() - 1) < 1e-2
    assert abs(np.mean(z**3)) < 2e-2 and abs(np.mean(z**4) - 3) < 5e-2  # symmetric, Gaussian tails
    counts = np.histogram(u, bins=16, range=(0, 1))[0]
    assert np.all(np.abs(counts / (n / 16) - 1) < 0.02)


def test_draws_are_deterministic_in_the_seed():
    n = 1 << 16
    runs = {}
    for seed in (1, 1, 2):
        u, z = np.zeros(n, np.float32), np.zeros(n, np.float32)
        million(u, z, seed)
        runs.setdefault(seed, []).append(u)
    np.testing.assert_array_equal(runs[1][0], runs[1][1])
    assert np.mean(runs[1][0] == runs[2][0]) < 1e-3


@bz.kernel
def pi_hits(hits: bz.Array[bz.int64, 1], samples: int, seed: int):
    for i in range(samples):
        x = bz.random.uniform(seed, 2 * i)
        y = bz.random.uniform(seed, 2 * i + 1)
        if x * x + y * y < 1.0:
            hits[0] += 1  # atomic: every thread updates the one counter


def test_monte_carlo_pi_matches_numpy():
    samples = 1 << 20
    hits = np.zeros(1, np.int64)
    pi_hits(hits, samples, 42)
    xy = bz.random.uniform(42, np.arange(2 * samples)).reshape(samples, 2)
    expected = np.count_nonzero(xy[:, 0] * xy[:, 0] + xy[:, 1] * xy[:, 1] < np.float32(1.0))
    assert hits[0] == expected
    assert abs(4 * hits[0] / samples - np.pi) < 1e-2


@pytest.mark.parametrize("call, message", [
    ("bz.random.uniform(1.5, i)", "seed: expected an integer, got float"),
    ("bz.random.uniform(seed, 0.5 * i)", "counter: expected an integer"),
    ("bz.random.uniform(seed, i, dtype=bz.int32)", "dtype: expected one of"),
    ("bz.random.uniform(seed)", "missing a required argument"),
])
def test_misuse_is_an_error_naming_the_argument(call, message, tmp_path):
    source = (f"import braze as bz\n\n@bz.kernel\ndef bad(out: bz.Array[bz.float32, 1], seed: int):\n"
              f"    for i in range(out.shape[0]):\n        out[i] = {call}\n")
    path = tmp_path / "bad_random.py"
    path.write_text(source)
    namespace: dict = {}
    exec(compile(source, str(path), "exec"), namespace)
    with pytest.raises(bz.KernelTypeError, match=message) as info:
        namespace["bad"](np.zeros(4, np.float32), 1)
    assert "bad_random.py:6" in str(info.value)
