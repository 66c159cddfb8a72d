"""Runtimes shared across signatures, and `reuse_buffer` outputs written straight into their input."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import config, engine
from braze.host.program import CpuDevice

rng = np.random.default_rng(3)


def _runtimes(f: bz.Fusion) -> list:
    return list(engine._cache_of(f).entries.values())


@pytest.fixture
def no_copy_back(monkeypatch):
    """Fails the test if a written-back output is copied into its input instead of written in place."""
    def refuse(self, target, source):
        raise AssertionError("the output was written into a buffer of its own, then copied back")

    monkeypatch.setattr(CpuDevice, "copy_into", refuse)


@pytest.fixture
def copies(monkeypatch) -> list:
    """The copies back made during the test."""
    made: list = []
    original = CpuDevice.copy_into
    monkeypatch.setattr(CpuDevice, "copy_into", lambda self, t, s: (made.append(t.shape), original(self, t, s)))
    return made


# --- one runtime for signatures that lower to the same kernel ----------------------------------------
def _view_and_double() -> bz.Fusion:
    """x is only viewed (on the host): its strides change the signature but not the kernel."""
    with bz.Fusion() as f:
        x, y = f.define_tensor((-1, -1)), f.define_tensor((-1,))
        f.add_output(x.T)
        f.add_output(y * 2.0)
    return f


def test_signatures_lowered_to_the_same_kernel_share_one_runtime(tmp_path):
    f, x, y = _view_and_double(), rng.standard_normal((4, 6), np.float32), rng.standard_normal(5, np.float32)
    with config.scope(cache_dir=tmp_path):
        f.execute([x, y])
        with bz.record() as rec:
            xt, doubled = f.execute([x[:, ::2], y])
    np.testing.assert_array_equal(xt, x[:, ::2].T)
    np.testing.assert_array_equal(doubled, y * 2)
    first, second = _runtimes(f)
    assert first is second  # two signatures, one runtime
    assert rec.compiles == [] and not [e for e in rec.entries if e.startswith("runtime")]


def test_kernel_reuse_can_be_disabled(tmp_path):
    f, x, y = _view_and_double(), rng.standard_normal((4, 6), np.float32), rng.standard_normal(5, np.float32)
    with config.scope(cache_dir=tmp_path, disable="kernel_reuse"):
        f.execute([x, y])
        f.execute([x[:, ::2], y])
    first, second = _runtimes(f)
    assert first is not second and first.executor.compiled is second.executor.compiled


def test_signatures_with_different_kernels_keep_their_own_runtimes():
    with bz.Fusion() as f:
        f.add_output(f.define_tensor((-1, -1)) + 1.0)
    a = rng.standard_normal((5, 6), np.float32)
    f.execute([a])
    f.execute([a[:, ::2]])  # the innermost stride is a parameter now, not the constant 1
    first, second = _runtimes(f)
    assert first is not second and first.executor.compiled is not second.executor.compiled


# --- reuse_buffer written in place -----------------------------------------------------------------
def test_a_pointwise_update_is_written_straight_into_its_input(no_copy_back):
    with bz.Fusion() as f:
        x, b = f.define_tensor((-1, -1)), f.define_tensor((-1,))
        f.add_output(bz.ops.tanh(x * 2.0 + b), alias=x)
        f.add_output(b * 3.0)
    a, bias = rng.standard_normal((64, 33), np.float32), rng.standard_normal(33, np.float32)
    expected = np.tanh(a * 2 + bias)
    updated, tripled = f.execute([a, bias])
    assert updated is a
    np.testing.assert_allclose(a, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(tripled, bias * 3)


def test_an_input_strided_across_rows_is_written_in_place(no_copy_back):
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        f.add_output(x + 1.0, alias=x, hidden=True)
    base = np.zeros((6, 4), np.float32)
    f.execute([base[::2]])  # every other row: the innermost stride is still 1
    np.testing.assert_array_equal(base[::2], 1)
    np.testing.assert_array_equal(base[1::2], 0)


def test_an_input_whose_innermost_stride_is_not_one_is_copied_back(copies):
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        f.add_output(x + 1.0, alias=x)
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    (y,) = f.execute([base[:, ::-1]])  # the kernel writes with the stride 1 it was compiled for
    assert np.shares_memory(y, base) and copies == [(4, 6)]
    np.testing.assert_array_equal(base, np.arange(24).reshape(4, 6) + 1)


def test_an_input_passed_twice_is_not_overwritten_before_it_is_read(copies):
    with bz.Fusion() as f:
        x, y = f.define_tensor((-1,)), f.define_tensor((-1,))
        f.add_output(x + y[::-1], alias=x)
    a = np.arange(6, dtype=np.float32)
    f.execute([a, a])
    np.testing.assert_array_equal(a, np.arange(6) + np.arange(6)[::-1])
    assert copies == [(6,)]


@pytest.mark.parametrize("build", [
    lambda x: x[::-1] + 0.0,  # reads other elements of the input it overwrites
    lambda x: x - x.mean(1, keepdim=True),  # a row reduction: its task caches rows in the output
    lambda x: x * x.sum(),  # a cut: a task before it reads the input
], ids=["reversed", "row-reduction", "full-reduction"])
def test_updates_that_read_other_elements_are_copied_back(build, copies):
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        f.add_output(build(x), alias=x)
    a = rng.standard_normal((8, 5), np.float32)
    (expected,) = f.execute([a.copy()], backend="reference")
    f.execute([a])
    (runtime,) = _runtimes(f)
    assert runtime.in_place == frozenset() and copies == [(8, 5)]
    np.testing.assert_allclose(a, expected, rtol=1e-5, atol=1e-5)


def test_an_update_also_read_by_another_output_is_copied_back(copies):
    with bz.Fusion() as f:
        x = f.define_tensor((-1,))
        f.add_output(x + 1.0, alias=x)
        f.add_output(x * 10.0)  # its task may run after the update's
    a = np.arange(4, dtype=np.float32)
    _, tenfold = f.execute([a])
    np.testing.assert_array_equal(tenfold, np.arange(4) * 10)
    np.testing.assert_array_equal(a, np.arange(4) + 1)
    assert copies == [(4,)]
