"""A column task with many accumulators split over its rows (a model's bias gradients grouped into one
task) folds the splits' partial results in one loop over the splits, a group of accumulators' slots
loaded at a time (cuda_grid.folds_together), instead of a loop each: the same slots in the same order,
so the same bits, in a tenth of the code. Each case runs its generated CUDA on the CPU
(tests/cuda_on_cpu.py) with its rows split across blocks, against float64 NumPy and against the loop-each
form, and on the CPU backend, outputs poisoned; a generated test draws the reductions (sums, maxima,
minima) and how many."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from cuda_on_cpu import available, run_on_cpu
from fuzz_scale import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze as bz
from braze import engine
from braze.codegen import cuda_column_vectors, cuda_grid

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")


def _column_sums(dtype, count: int) -> bz.Fusion:
    with bz.Fusion() as f:
        x = f.define_tensor([-1, -1], dtype=dtype)
        for k in range(count):
            f.add_output((x * float(k + 1) + float(k)).sum([0]))
    return f


def _split_runs(f: bz.Fusion, x: np.ndarray) -> list[np.ndarray]:
    """The outputs of the fusion's CUDA run on the CPU, on a fake GPU small enough that the rows
    split across blocks (checked: the launch's second scalar is the splits)."""
    with bz.config.scope(enable="poison_outputs"):
        outputs, launches = run_on_cpu(f, [x], sm_count=4, resident=2)
    assert [launch[1] for launch in launches] == ["columns"] and launches[0][4][1] > 1
    return [np.asarray(o) for o in outputs]


def _loop_each(f: bz.Fusion, x: np.ndarray) -> list[np.ndarray]:
    """The same run with every accumulator folded in a loop of its own (the form before)."""
    with mock.patch.object(cuda_grid, "folds_together", lambda accumulators, per_round: False), \
            mock.patch.object(cuda_column_vectors, "folds_together", lambda accumulators, per_round: False):
        body = engine.cuda_source(f, [x]).body
        assert "bz_slot_" not in body
        return _split_runs(f, x)


# (dtype, columns, accumulators, fold loops): the task's vector path (its columns a vector a thread) and
# its path of a column a thread each fold in one loop where they have twice a group of accumulators.
@pytest.mark.parametrize(("dtype", "columns", "count", "loops"), [
    (bz.float32, 64, 20, 2),  # 4 columns a thread: groups of 8 accumulators; a column a thread: of 8
    (bz.float32, 63, 20, 2),  # no vector divides the row: the column-a-thread path runs
    (bz.bfloat16, 64, 10, 11),  # 8 columns a thread: groups of 4; a column a thread: a loop each
])
def test_many_accumulators_fold_their_splits_in_one_loop_to_the_same_bits(dtype, columns, count, loops):
    x = np.random.default_rng(columns).standard_normal((2048, columns)).astype(dtype.numpy)
    f = _column_sums(dtype, count)
    body = engine.cuda_source(f, [x]).body
    assert "bz_slot_" in body and body.count("for (int b = ") == loops
    together = _split_runs(f, x)
    x64, tolerance = x.astype(np.float64), 2e-3 if dtype == bz.float32 else 1e-2
    for k, got in enumerate(together):
        np.testing.assert_allclose(got.astype(np.float64), (x64 * (k + 1) + k).sum(0), rtol=tolerance, atol=2e-2)
    for got, each in zip(together, _loop_each(f, x)):
        assert got.tobytes() == each.tobytes()
    with bz.config.scope(enable="poison_outputs"):
        cpu = f.execute([x])
    for k, got in enumerate(cpu):
        np.testing.assert_allclose(np.asarray(got, np.float64), (x64 * (k + 1) + k).sum(0), rtol=tolerance, atol=2e-2)


def test_few_accumulators_keep_a_loop_each_over_batches_of_splits():
    x = np.random.default_rng(0).standard_normal((2048, 64)).astype(np.float32)
    body = engine.cuda_source(_column_sums(bz.float32, 3), [x]).body
    assert "bz_slot_" not in body and "bz_slots[" in body


def test_groups_are_consecutive_and_together_takes_twice_a_group():
    assert cuda_grid.fold_groups(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert not cuda_grid.folds_together(15, 8) and cuda_grid.folds_together(16, 8)


def test_many_full_sums_of_one_tensor_fold_their_blocks_in_one_loop_to_the_same_bits():
    # One task (engine._merged_full_reductions), 17 accumulators: the last block folds every block's
    # slots of all of them in one loop over the blocks.
    x = np.random.default_rng(7).standard_normal(200003).astype(np.float32)
    with bz.Fusion() as f:
        xt = f.define_tensor([-1])
        for k in range(17):
            f.add_output((xt * float(k + 1)).sum())
    assert "bz_slot_" in engine.cuda_source(f, [x]).body
    with bz.config.scope(enable="poison_outputs"):
        together, launches = run_on_cpu(f, [x], sm_count=4, resident=2)
    assert len(launches) == 1 and launches[0][2] > 1  # one launch, over several blocks
    x64 = x.astype(np.float64)
    for k, got in enumerate(together):
        np.testing.assert_allclose(float(np.asarray(got)), (x64 * (k + 1)).sum(), rtol=1e-5, atol=1e-2)
    with mock.patch.object(cuda_grid, "folds_together", lambda accumulators, per_round: False):
        each, _ = run_on_cpu(f, [x], sm_count=4, resident=2)
    for got, expected in zip(together, each):
        assert np.asarray(got).tobytes() == np.asarray(expected).tobytes()


_COMBINES = {"sum": (lambda t, k: (t * float(k + 1) + float(k)).sum([0]), lambda x, k: (x * (k + 1) + k).sum(0)),
             "max": (lambda t, k: bz.ops.max(t * float(k + 1), [0]), lambda x, k: (x * (k + 1)).max(0)),
             "min": (lambda t, k: bz.ops.min(t - float(k), [0]), lambda x, k: (x - k).min(0))}


@settings(max_examples=examples(2), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([bz.float32, bz.bfloat16]), columns=st.sampled_from([63, 64, 96]),
       combines=st.lists(st.sampled_from(sorted(_COMBINES)), min_size=1, max_size=24), seed=st.integers(0, 99))
def test_random_column_reductions_fold_to_the_bits_of_a_loop_each(dtype, columns, combines, seed):
    """Random sums, maxima and minima over the rows, as many as a loop a fold or a fold of groups takes:
    the same bits either way, and float64 NumPy's values."""
    x = np.random.default_rng(seed).standard_normal((2048, columns)).astype(dtype.numpy)
    with bz.Fusion() as f:
        xt = f.define_tensor([-1, -1], dtype=dtype)
        for k, combine in enumerate(combines):
            f.add_output(_COMBINES[combine][0](xt, k))
    body = engine.cuda_source(f, [x]).body
    if len(combines) >= 2 * cuda_grid.SLOT_BATCH:
        assert "bz_slot_" in body
    elif len(combines) < cuda_grid.SLOT_BATCH:
        assert "bz_slot_" not in body
    together = _split_runs(f, x)
    x64, tolerance = x.astype(np.float64), 2e-3 if dtype == bz.float32 else 1e-2
    for k, (combine, got) in enumerate(zip(combines, together, strict=True)):
        np.testing.assert_allclose(got.astype(np.float64), _COMBINES[combine][1](x64, k), rtol=tolerance, atol=2e-2)
    for got, each in zip(together, _loop_each(f, x)):
        assert got.tobytes() == each.tobytes()
