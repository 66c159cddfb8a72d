"""The cached call on the host (docs/architecture.md, "The cached call"): after the first call of an
input description, `execute` runs a prepared call that builds nothing and compiles nothing, and
gives what the host program gives. The GPU's twin is tests/cuda/test_hot_path.py."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
from segments import alternating, reference

import braze as bz
from braze import config
from braze.errors import InputError

rng = np.random.default_rng(5)


def pointwise() -> bz.Fusion:
    with bz.Fusion(name="relu_fma") as f:
        x, y, z = (f.define_tensor([-1]) for _ in range(3))
        f.add_output(bz.ops.relu(x * y + z))
    return f


def randn(*shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_a_cached_call_builds_nothing_and_launches_the_same_tasks() -> None:
    f = pointwise()
    x, y, z = randn(1000), randn(1000), randn(1000)
    with bz.record() as first:
        f.execute([x, y, z])
    assert first.entries
    for _ in range(3):
        with bz.record() as rec:
            (out,) = f.execute([x, y, z])
        assert rec.entries == [] and rec.compiles == []
        assert [(la.task, la.begin, la.end) for la in rec.launches] == \
            [(la.task, la.begin, la.end) for la in first.launches]
        np.testing.assert_array_equal(out, np.maximum(x * y + z, 0))


def test_a_cached_host_call_runs_its_tasks_itself_unless_a_recorder_is_open(monkeypatch) -> None:
    from braze.runtime import thread_pool
    from braze.runtime.backends import cpu

    f = pointwise()
    small, large = [randn(1000)] * 3, [randn(1 << 21)] * 3
    f.execute(small), f.execute(large)  # prepared
    through_tasks, split = [], []
    monkeypatch.setattr(cpu.CpuTasks, "launch", lambda self, *a, **kw: through_tasks.append(a))
    real_parallel_for = thread_pool.parallel_for
    monkeypatch.setattr(cpu, "parallel_for", lambda *a, **kw: split.append(a) or real_parallel_for(*a, **kw))
    for inputs in (small, large):
        (out,) = f.execute(inputs)
        np.testing.assert_array_equal(out, np.maximum(inputs[0] * inputs[1] + inputs[2], 0))
    assert through_tasks == [] and [a[2] for a in split] == [1 << 21]  # only the large call splits
    with bz.record():
        f.execute(small)
    assert len(through_tasks) == 1  # noted by CpuTasks.launch, as the host program's launches are


def test_each_call_gets_its_own_inputs_and_a_fresh_output() -> None:
    f = pointwise()
    outputs = []
    for _ in range(4):
        x, y, z = randn(64), randn(64), randn(64)
        (out,) = f.execute([x, y, z])
        np.testing.assert_array_equal(out, np.maximum(x * y + z, 0))
        outputs.append(out)
    assert not any(np.shares_memory(a, b) for a, b in zip(outputs, outputs[1:]))


def test_a_new_shape_prepares_a_call_and_compiles_nothing() -> None:
    f = pointwise()
    f.execute([randn(10)] * 3)
    x = randn(777)
    with bz.record() as rec:
        (out,) = f.execute([x, x, x])
    assert rec.compiles == [] and rec.entries == ["prepared call relu_fma"]
    np.testing.assert_array_equal(out, np.maximum(x * x + x, 0))


def test_other_strides_are_another_description() -> None:
    f = pointwise()
    a = randn(100)
    f.execute([a, a, a])
    strided = randn(200)[::2]
    (out,) = f.execute([strided, a, a])
    np.testing.assert_array_equal(out, np.maximum(strided * a + a, 0))


def test_wrong_inputs_still_raise_after_a_cached_call() -> None:
    f = pointwise()
    x = randn(8)
    f.execute([x, x, x])
    f.execute([x, x, x])
    with pytest.raises(InputError, match="expected float32"):
        f.execute([x, x, x.astype(np.float64)])
    with pytest.raises(InputError, match="expected 3 inputs"):
        f.execute([x, x])


def test_scalars_are_patched_per_call_and_checked() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor([-1])
        a, n = f.define_scalar(dtype=bz.float64), f.define_scalar(dtype=bz.int8)
        f.add_output(x * a + bz.ops.cast(n, bz.float64))
    x = randn(50)
    for alpha, shift in ((2.0, 3), (-0.5, -128), (True, 127), (7, 0)):
        (out,) = f.execute([x, alpha, shift])
        np.testing.assert_allclose(out, x * np.float64(alpha) + shift)
    with pytest.raises(InputError, match="int8"):
        f.execute([x, 1.0, 300])


@pytest.mark.parametrize("shape", [(7, 300), (1, 5000), (64, 3)])
def test_multi_task_fusions_match_on_every_call(shape) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor([-1, -1])
        f.add_output(bz.ops.softmax(x, -1))
        f.add_output(bz.ops.sum(x, axes=[0, 1]))
        f.add_output(x - bz.ops.mean(x, axes=[0, 1]))
    x = randn(*shape)
    e = np.exp(x - x.max(-1, keepdims=True))
    for _ in range(3):
        soft, total, centred = f.execute([x])
        np.testing.assert_allclose(soft, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(total, x.sum(dtype=np.float64), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(centred, x - x.mean(dtype=np.float64), rtol=1e-4, atol=1e-5)


def test_twelve_segments_through_the_cached_call() -> None:
    f = alternating()
    x = randn(20, 40)
    first = f.execute([x])[0]
    with bz.record() as rec:
        again = f.execute([x])[0]
    assert rec.entries == [] and len(rec.launches) == 12
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(again, reference(x), rtol=1e-4, atol=1e-4)


def test_random_ops_draw_the_reference_stream_per_call() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor([-1])
        f.add_output(x + bz.ops.rand(x.shape))
        f.add_output(bz.ops.randn(x.shape) * 1.0)
    x = np.zeros(1000, np.float32)
    results = {}
    for backend in (None, "reference"):
        bz.manual_seed(11)
        results[backend] = [f.execute([x], backend=backend) for _ in range(3)]
    for compiled, expected in zip(results[None], results["reference"]):
        for c, e in zip(compiled, expected):
            np.testing.assert_allclose(c, e, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(results[None][1][0], results[None][2][0])


def test_aliased_outputs_keep_running_the_host_program_without_rebuilding() -> None:
    with bz.Fusion() as f:
        acc, step = f.define_tensor([-1]), f.define_tensor([-1])
        f.add_output(acc + step, alias=acc)
        f.add_output(step[::2])
    acc, step = np.zeros(10, np.float32), randn(10)
    for calls in range(1, 4):
        with bz.record() as rec:
            _, view = f.execute([acc, step])
        np.testing.assert_allclose(acc, step * calls, rtol=1e-6)
        assert np.shares_memory(view, step)
    assert rec.entries == []


def test_the_fast_call_can_be_disabled() -> None:
    f = pointwise()
    x = randn(16)
    with config.scope(disable="fast_call"):
        for _ in range(3):
            (out,) = f.execute([x, x, x])
            np.testing.assert_array_equal(out, np.maximum(x * x + x, 0))
    assert "_fast_calls" not in f.__dict__  # nothing was prepared: every call ran the host program


def test_threads_calling_one_fusion_get_their_own_results() -> None:
    f = pointwise()
    inputs = [[randn(3000) for _ in range(3)] for _ in range(4)]
    f.execute(inputs[0])
    errors = []

    def worker(x, y, z) -> None:
        for _ in range(300):
            (out,) = f.execute([x, y, z])
            if not np.array_equal(out, np.maximum(x * y + z, 0)):
                errors.append("wrong result")
                return

    threads = [threading.Thread(target=worker, args=xs) for xs in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_ten_thousand_cached_calls_hold_python_memory_steady() -> None:
    f = pointwise()
    x = randn(256)
    for _ in range(2_000):  # warm up: the interpreter's free lists of small objects fill first
        f.execute([x, x, x])
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(10_000):
            f.execute([x, x, x])
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 64 * 1024, f"Python memory grew by {grown} bytes over 10,000 calls"


def test_a_call_first_made_under_another_configuration_is_prepared_again() -> None:
    f = pointwise()
    x = randn(32)
    with config.scope(disable="simplify"):
        f.execute([x, x, x])  # run and prepared under this configuration only
    with bz.record() as rec:
        f.execute([x, x, x])
    assert rec.entries == ["runtime relu_fma", "prepared call relu_fma"]
    for _ in range(3):
        with bz.record() as rec:
            (out,) = f.execute([x, x, x])
        assert rec.entries == []
    np.testing.assert_array_equal(out, np.maximum(x * x + x, 0))


def test_inputs_not_a_list_are_an_input_error_after_a_cached_call_too() -> None:
    f = pointwise()
    x = randn(8)
    f.execute([x, x, x])
    with pytest.raises(InputError, match="expected a list of 3 inputs, got list_iterator"):
        f.execute(iter([x, x, x]))


def test_a_prepared_call_not_taken_is_not_prepared_again() -> None:
    f = pointwise()
    x = randn(32)
    f.execute([x, x, x])
    prepared = f.__dict__["_fast_calls"].prepared[f.__dict__["_fast_calls"].key([x, x, x])]
    with prepared.busy:  # as if another thread were in it: this call takes the host program
        with bz.record() as rec:
            (out,) = f.execute([x, x, x])
    assert rec.entries == [] and len(rec.launches) == 1
    np.testing.assert_array_equal(out, np.maximum(x * x + x, 0))


def test_each_prepared_call_is_its_kernel_executors_entry(monkeypatch) -> None:
    from braze import engine
    from braze.runtime import fast_call

    monkeypatch.setattr(fast_call, "MAX_DESCRIPTIONS", 2)
    f = pointwise()
    fast = None
    for n in (10, 20, 30):
        x = randn(n)
        f.execute([x, x, x])
        fast = f.__dict__["_fast_calls"]

    def filed() -> dict:
        entries = {}
        for runtime in {id(r): r for r in engine._cache_of(f).entries.values()}.values():
            entries.update(runtime.executor.entries)
        return entries

    assert filed() == dict(fast.prepared) and len(fast.prepared) == 2  # the first description was dropped
    assert fast.key([randn(10)] * 3) not in filed()
    with config.scope(enable="poison_outputs"):  # another configuration: prepared again, the others dropped
        f.execute([randn(40)] * 3)
    assert filed() == dict(fast.prepared) and len(fast.prepared) == 1


def test_the_numpy_guard_matches_the_same_description_only() -> None:
    from braze.runtime.fast_call import guard

    x, y = np.zeros((8, 4), np.float32), np.ones((8, 4), np.float32)
    matches = guard([x, y, 2.0], frozenset({2})).function()
    assert matches([np.ones((8, 4), np.float32), x, -1.5])
    for other in ([x, y.astype(np.float64), 2.0],             # dtype
                  [x, np.zeros((8, 5), np.float32), 2.0],     # shape
                  [x, np.zeros((4, 8), np.float32).T, 2.0],   # strides
                  [x, y, 2],                                  # a scalar's type
                  [x, y],                                     # the count
                  [x, y, 2.0, 3.0],
                  [x, y.view(type('Sub', (np.ndarray,), {})), 2.0],  # a subclass
                  [x, 1.0, 2.0]):
        assert not matches(other), other
