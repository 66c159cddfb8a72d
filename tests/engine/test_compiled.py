"""The compiled CPU backend: fusion counts, cache hits, the disk cache and vectorized code."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import braze as bz
from braze import config, engine
from braze.compile import disk_cache, llvm_toolchain
from braze.runtime import thread_pool

rng = np.random.default_rng(7)


def _run(build, inputs, **kwargs):
    with bz.Fusion() as f:
        build(f)
    with bz.record() as rec:
        outs = f.execute(inputs, backend="llvm", **kwargs)
    expected = f.execute(inputs, backend="reference")
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    return f, rec


def test_chain_of_ten_elementwise_ops_with_broadcasts_is_one_kernel():
    def build(f):
        x, b, c = f.define_tensor((-1, -1)), f.define_tensor((-1,)), f.define_tensor((-1, 1))
        y = bz.ops.exp(x + b) * c - b
        y = bz.ops.tanh(y) / (c + 2.0)
        y = bz.ops.maximum(y, b) + bz.ops.sin(c) * x
        f.add_output(bz.ops.sigmoid(y) - 0.5)

    f, rec = _run(build, [rng.standard_normal((64, 33), np.float32), rng.standard_normal(33, np.float32),
                          rng.standard_normal((64, 1), np.float32)])
    assert len(f.exprs) >= 10
    assert len(rec.launches) == 1


def test_index_remapping_views_fuse_with_elementwise_ops_into_one_kernel():
    def build(f):
        x, y, z = f.define_tensor((-1, -1)), f.define_tensor((-1, -1)), f.define_tensor((1, -1))
        t = bz.ops.permute(x, [1, 0])[1:, :] * 2.0  # [7, 6]
        t = bz.ops.pad(t, [(1, 0), (0, 0)], 0.5)  # [8, 6]
        t = bz.ops.cat([t, bz.ops.flip(y, 0)], axis=1)  # [8, 9]
        f.add_output(bz.ops.exp(t) + bz.ops.expand(z, [8, 9]))

    _, rec = _run(build, [rng.standard_normal((6, 8), np.float32), rng.standard_normal((8, 3), np.float32),
                          rng.standard_normal((1, 9), np.float32)])
    assert len(rec.launches) == 1


@pytest.mark.parametrize("composite", ["softmax", "layer_norm", "rms_norm"])
def test_normalizations_are_one_kernel(composite):
    def build(f):
        f.add_output(getattr(bz.ops, composite)(f.define_tensor((-1, -1))))

    _, rec = _run(build, [rng.standard_normal((16, 300), np.float32)])
    assert len(rec.launches) == 1


def test_softmax_over_the_first_axis_is_one_kernel_with_columns_outside():
    _, rec = _run(lambda f: f.add_output(bz.ops.softmax(f.define_tensor((-1, -1)), axis=0)),
                  [rng.standard_normal((40, 7), np.float32)])
    assert len(rec.launches) == 1


def test_sum_over_each_axis_is_at_most_two_kernels():
    def build(f):
        x = f.define_tensor((-1, -1))
        f.add_output(x.sum(0))
        f.add_output(x.sum(1))

    _, rec = _run(build, [rng.standard_normal((30, 20), np.float32)])
    assert len(rec.launches) <= 2


def test_column_means_subtracted_are_one_kernel_with_columns_outside():
    def build(f):
        x = f.define_tensor((-1, -1))
        f.add_output(x - x.mean(0, keepdim=True))

    _, rec = _run(build, [rng.standard_normal((30, 8200), np.float32)])
    assert len(rec.launches) == 1
    # The task runs over strips of up to 4096 columns; each column's mean is computed once, by its strip.
    assert rec.launches[0].end == 3


def test_full_reduction_broadcast_back_is_cut_into_two_kernels():
    def build(f):
        x = f.define_tensor((-1, -1))
        f.add_output(x - x.mean())

    _, rec = _run(build, [rng.standard_normal((30, 20), np.float32)])
    assert len(rec.launches) == 2  # the mean is materialized once, not recomputed per row


def test_new_shapes_of_one_signature_compile_nothing():
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        f.add_output(bz.ops.softmax(x * 2.0))
    f.execute([rng.standard_normal((8, 8), np.float32)])
    with bz.record() as rec:
        (y,) = f.execute([rng.standard_normal((13, 5), np.float32)])
    assert rec.compiles == [] and y.shape == (13, 5)
    assert len(rec.launches) == 1


def test_a_new_stride_pattern_is_a_new_signature():
    with bz.Fusion() as f:
        f.add_output(f.define_tensor((-1, -1)) + 1.0)
    a = rng.standard_normal((6, 6), np.float32)
    f.execute([a])
    with bz.record() as rec:
        (y,) = f.execute([a.T])
    np.testing.assert_array_equal(y, a.T + 1)
    assert len(rec.segments) == 1  # compiled again for a transposed (non-unit innermost stride) input


def test_warm_disk_cache_in_a_new_process_compiles_nothing(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, braze as bz
        with bz.Fusion() as f:
            x = f.define_tensor((-1, -1))
            f.add_output(bz.ops.layer_norm(x) * 3.0 + 1.0)
        with bz.record() as rec:
            (y,) = f.execute([np.ones((4, 8), np.float32)])
        print(len(rec.compiles))
    """)
    env = {**os.environ, "BRAZE_CACHE_DIR": str(tmp_path)}
    counts = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
              .stdout.strip() for _ in range(2)]
    assert counts == ["1", "0"]


def test_corrupt_cache_entry_is_a_miss(tmp_path):
    with config.scope(cache_dir=tmp_path):
        disk_cache.store("ab" * 32, b"payload")
        (path,) = list(tmp_path.rglob("*.bin"))
        assert disk_cache.load("ab" * 32) == b"payload"
        path.write_bytes(path.read_bytes()[:-3])  # truncated
        assert disk_cache.load("ab" * 32) is None
        path.write_bytes(b"garbage")
        assert disk_cache.load("ab" * 32) is None


def test_disabled_disk_cache_stores_nothing(tmp_path):
    with config.scope(cache_dir=tmp_path, disable="disk_cache"):
        disk_cache.store("cd" * 32, b"payload")
        assert disk_cache.load("cd" * 32) is None
    assert not list(tmp_path.rglob("*.bin"))


def test_inner_loops_are_vectorized(capsys, tmp_path):
    with config.scope(dump="llvm_ir", cache_dir=tmp_path):
        with bz.Fusion() as f:
            x, y = f.define_tensor((-1, -1)), f.define_tensor((-1, -1))
            f.add_output(x * y + 3.0)
        f.execute([np.ones((4, 64), np.float32), np.ones((4, 64), np.float32)])
    ir_text = capsys.readouterr().err
    assert "x float>" in ir_text  # LLVM turned the innermost loop into vector instructions


def test_large_problems_run_on_several_threads():
    with bz.Fusion() as f:
        f.add_output(f.define_tensor((-1, -1)) * 2.0)
    a = rng.standard_normal((1024, 1024), np.float32)
    with bz.record() as rec:
        (y,) = f.execute([a])
    np.testing.assert_array_equal(y, a * 2)
    expected_chunks = min(os.cpu_count() or 1, 2) if (os.cpu_count() or 1) > 1 else 1
    assert rec.launches[0].chunks >= expected_chunks


def test_small_problems_run_on_the_calling_thread(monkeypatch):
    def no_pool():
        raise AssertionError("a small problem was handed to the worker threads")

    monkeypatch.setattr(thread_pool, "_pool", no_pool)
    with bz.Fusion() as f:
        f.add_output(bz.ops.exp(f.define_tensor((-1, -1))) * 2.0)
    a = rng.standard_normal((8, 8), np.float32)
    with bz.record() as rec:
        (y,) = f.execute([a])
    np.testing.assert_allclose(y, np.exp(a) * 2, rtol=1e-6)
    assert [launch.chunks for launch in rec.launches] == [1]


def test_task_functions_release_the_gil():
    # ctypes releases the GIL around calls through a CFUNCTYPE prototype, not a PYFUNCTYPE one: the
    # worker threads then run the native code side by side.
    assert not llvm_toolchain.TASK_SIGNATURE._flags_ & ctypes._FUNCFLAG_PYTHONAPI
    with bz.Fusion() as f:
        f.add_output(f.define_tensor((-1,)) + 1.0)
    f.execute([np.ones(4, np.float32)])
    (runtime,) = engine._cache_of(f).entries.values()
    assert all(isinstance(fn, llvm_toolchain.TASK_SIGNATURE) for fn in runtime.executor.functions)


def test_in_place_output_reads_the_original_values():
    with bz.Fusion() as f:
        x = f.define_tensor((-1,))
        f.add_output(x[::-1] + 0.0, alias=x)
        f.add_output(x * 2.0)
    a = np.arange(5, dtype=np.float32)
    updated, doubled = f.execute([a], backend="llvm")
    assert np.shares_memory(updated, a)
    np.testing.assert_array_equal(a, np.arange(5)[::-1])
    np.testing.assert_array_equal(doubled, np.arange(5) * 2)


def test_empty_max_is_an_input_error_on_the_compiled_backend():
    with bz.Fusion() as f:
        f.add_output(f.define_tensor((-1, -1)).max(1))
    with pytest.raises(bz.InputError, match="max: .* empty dimension"):
        f.execute([np.ones((3, 0), np.float32)], backend="llvm")
