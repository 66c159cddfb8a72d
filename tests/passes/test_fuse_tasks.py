"""Task fusion decisions (docs/architecture.md, "Task fusion"). Each kernel runs fused and unfused; the
arrays must agree bit for bit, and the decision (and its reason in DIAG) must be the one the rules give."""

import numpy as np
import pytest

import braze as bz
from braze import config
from braze.passes import fuse_tasks as ft

N = 16  # a power of two, so i ^ 5 stays below N
K = 5
F32 = bz.Array[bz.float32, 1]
I64 = bz.Array[bz.int64, 1]


def arrays(seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.standard_normal(4 * N + 8).astype(np.float32) for _ in range(3))
    ix = rng.integers(0, 4 * N + 8, 4 * N + 8).astype(np.int64)
    return [a, b, c, ix]


def run(fn, make_args=arrays, **knobs):
    """(decisions, launches fused, launches unfused); asserts both runs leave the same arrays."""
    fused, unfused = bz.kernel(fn), bz.kernel(fuse_tasks=False)(fn)
    results = []
    for kern in (fused, unfused):
        args = make_args()
        with config.scope(**knobs), bz.record() as rec:
            kern(*args)
        results.append((args, len(rec.launches)))
    for x, y in zip(results[0][0], results[1][0]):
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y)
    return fused.decisions(), results[0][1], results[1][1]


def only(decisions):
    assert len(decisions) == 1, decisions
    return decisions[0]


# --- fused ----------------------------------------------------------------------------------------
def integrate(x: F32, v: F32, f: F32, ix: I64):
    for i in range(x.shape[0]):
        v[i] += f[i] * 0.01
    for i in range(x.shape[0]):
        x[i] += v[i] * 0.01


def test_integrate_velocity_then_position_fuses():
    decisions, fused, unfused = run(integrate)
    d = only(decisions)
    assert (d.fused, d.reason, fused, unfused) == (True, ft.FUSED_RAW, 1, 2)


def disjoint(a: F32, b: F32, c: F32, ix: I64):
    for i in range(N):
        a[i] = a[i] * 2.0
    for i in range(N):
        b[i] = b[i + 1] + 1.0


def test_disjoint_arrays_fuse():
    d = only(run(disjoint)[0])
    assert (d.fused, d.reason) == (True, ft.FUSED_DISJOINT)


def shared_reads(a: F32, b: F32, c: F32, ix: I64):
    for i in range(N):
        a[i] = c[i] + c[2 * i]
    for i in range(N):
        b[i] = c[i + 1] * c[ix[i] % N]


def test_shared_read_only_arrays_fuse():
    d = only(run(shared_reads)[0])
    assert (d.fused, d.reason) == (True, ft.FUSED_DISJOINT)


def _same_index_kernel(index: str):
    source = f'''
def same_index(a: F32, b: F32, c: F32, ix: I64, n: int):
    for i in range(n):
        a[{index}] = b[i] * 2.0 + a[{index}]
    for i in range(n):
        c[i] = a[{index}] + 1.0
'''
    namespace = {"F32": F32, "I64": I64}
    _compile_source(source, f"same_index_{abs(hash(index))}", namespace)
    return namespace["same_index"]


def _compile_source(source: str, name: str, namespace: dict) -> None:
    import linecache

    filename = f"<braze-test {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


@pytest.mark.parametrize("index", ["i", "i + 3", "2 * i", "n - 1 - i", "i ^ 5", "i << 1", "-(-i)", "3 + i - 1"])
def test_the_same_injective_index_in_both_bodies_fuses(index):
    fn = _same_index_kernel(index)
    d = only(run(fn, lambda: arrays() + [N])[0])
    assert (d.fused, d.reason) == (True, ft.FUSED_RAW)


def chain(a: F32, b: F32, c: F32, ix: I64):
    for i in range(N):
        a[i] = 1.0
    for i in range(N):
        a[i] += 1.0
    for i in range(N):
        b[i] = a[i] * 3.0
    for i in range(N):
        c[i] = b[i] - a[i]
    for i in range(N):
        a[i] = c[i] + b[i]


def test_chains_fuse_to_a_fixed_point():
    decisions, fused, unfused = run(chain)
    assert (fused, unfused) == (1, 5)
    assert all(d.fused for d in decisions)


def grid(a: bz.Array[bz.float32, 2], b: bz.Array[bz.float32, 2]):
    for i, j in bz.ndrange(a.shape[0], a.shape[1]):
        a[i, j] = i * 1.0 + j
    for i, j in bz.ndrange(a.shape[0], a.shape[1]):
        b[i, j] = a[i, j] * 2.0


def test_ndrange_tasks_fuse():
    d = only(run(grid, lambda: [np.zeros((5, 7), np.float32), np.zeros((5, 7), np.float32)])[0])
    assert (d.fused, d.reason) == (True, ft.FUSED_RAW)


def cells_3d(a: bz.Array[bz.float32, 3]):
    for i, j, k in bz.ndrange(a.shape[0], a.shape[1], a.shape[2]):
        a[i, j, k] = a[i, j, k] + 1.0
    for i, j, k in bz.ndrange(a.shape[0], a.shape[1], a.shape[2]):
        a[i, j, k] = a[i, j, k] * 2.0 + k


def cells_4d(a: bz.Array[bz.float32, 4], b: bz.Array[bz.float32, 4]):
    for i, j, k, m in bz.ndrange((1, a.shape[0]), a.shape[1], a.shape[2], a.shape[3]):
        a[i, j, k, m] = i * 1000.0 + j * 100.0 + k * 10.0 + m
    for i, j, k, m in bz.ndrange((1, a.shape[0]), a.shape[1], a.shape[2], a.shape[3]):
        b[i, j, k, m] = a[i, j, k, m] * 2.0


def test_an_ndrange_cell_of_three_or_four_axes_is_one_injective_index():
    d = only(run(cells_3d, lambda: [np.arange(105, dtype=np.float32).reshape(3, 5, 7)])[0])
    assert (d.fused, d.reason) == (True, ft.FUSED_RAW)
    d = only(run(cells_4d, lambda: [np.zeros((3, 2, 4, 5), np.float32), np.zeros((3, 2, 4, 5), np.float32)])[0])
    assert (d.fused, d.reason) == (True, ft.FUSED_RAW)


def planes_3d(a: bz.Array[bz.float32, 3], plane: bz.Array[bz.float32, 2]):
    for i, j, k in bz.ndrange(a.shape[0], a.shape[1], a.shape[2]):
        plane[i, k] = a[i, j, k]  # every j of (i, k) writes plane[i, k]
    for i, j, k in bz.ndrange(a.shape[0], a.shape[1], a.shape[2]):
        a[i, j, k] = plane[i, k] * 2.0


def test_two_of_three_ndrange_axes_are_not_injective():
    def make():
        return [np.arange(60, dtype=np.float32).reshape(3, 4, 5), np.zeros((3, 5), np.float32)]

    d = only(run(planes_3d, make)[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_NOT_INJECTIVE)


def split_by_scalar(a: bz.Array[bz.float32, 2], n: bz.int64):
    for t in range(a.shape[0]):
        a[t // n, t % n] = a[t // n, t % n] + 1.0
    for t in range(a.shape[0]):
        a[t // n, t % n] = a[t // n, t % n] * 2.0


def test_a_split_by_a_scalar_divisor_is_not_injective():
    # n = 0 would send every thread to a[0, 0] (integer division by zero gives 0); a negative n breaks
    # the split too
    d = only(run(split_by_scalar, lambda: [np.zeros((4, 4), np.float32), 4])[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_NOT_INJECTIVE)


# --- rejected ---------------------------------------------------------------------------------------
def different_bounds(a: F32, b: F32, c: F32, ix: I64):
    for i in range(N):
        a[i] = 1.0
    for i in range(N - 1):
        b[i] = 2.0


def test_different_bounds_reject():
    d = only(run(different_bounds)[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_BOUNDS)


def _reader_kernel(index: str):
    source = f'''
def reader(a: F32, b: F32, c: F32, ix: I64):
    for i in range(N):
        b[i] = a[{index}]
    for i in range(N):
        a[i] = c[i] * 3.0
'''
    namespace = {"F32": F32, "I64": I64, "N": N, "K": K}
    _compile_source(source, f"reader_{abs(hash(index))}", namespace)
    return namespace["reader"]


@pytest.mark.parametrize("index", ["i // 2", "i % 2", "min(i, K)", "max(i, K)", "i & 1", "i | 1", "i >> 1", "0",
                                   "i * 0", "K"])
def test_non_injective_indices_reject(index):
    d = only(run(_reader_kernel(index))[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_NOT_INJECTIVE)
    assert d.detail == f"a[{_printed(index)}]"


def _printed(index: str) -> str:
    return {"i // 2": "floordiv(i, 2)", "i % 2": "remainder(i, 2)", "min(i, K)": "minimum(i, 5)",
            "max(i, K)": "maximum(i, 5)", "i & 1": "bitwise_and(i, 1)", "i | 1": "bitwise_or(i, 1)",
            "i >> 1": "right_shift(i, 1)", "0": "0", "i * 0": "mul(i, 0)", "K": "5"}[index]


def neighbour(a: F32, b: F32, c: F32, ix: I64):
    for i in range(1, N):
        a[i] = c[i] * 2.0
    for i in range(1, N):
        b[i] = a[i - 1]


def test_neighbour_index_rejects():
    d = only(run(neighbour)[0])
    assert (d.fused, d.reason, d.detail) == (False, ft.REJECT_ADDRESSES, "a[i] vs a[sub(i, 1)]")


def indirect(a: F32, b: F32, c: F32, ix: I64):
    for i in range(N):
        a[i] = c[i] * 2.0
    for i in range(N):
        b[i] = a[ix[i] % N]


def test_indirect_index_rejects():
    d = only(run(indirect)[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_INDIRECT)


def shared_atomic(a: F32, total: bz.Array[bz.int64, 1], c: F32, ix: I64):
    for i in range(N):
        bz.atomic_add(total[0], ix[i])
    for i in range(N):
        a[i] = total[0] * 1.0


def test_atomic_on_a_shared_array_rejects():
    def make():
        a, _, c, ix = arrays()
        return [a, np.zeros(1, np.int64), c, ix]

    d = only(run(shared_atomic, make)[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_ATOMIC)


def own_atomic(a: F32, counts: bz.Array[bz.int64, 1], c: F32, ix: I64):
    for i in range(N):
        bz.atomic_add(counts[i], 2)
    for i in range(N):
        counts[i] += 1


def test_atomic_at_the_threads_own_element_fuses():
    def make():
        a, _, c, ix = arrays()
        return [a, np.zeros(N, np.int64), c, ix]

    d = only(run(own_atomic, make)[0])
    assert (d.fused, d.reason) == (True, ft.FUSED_RAW)


def task_level_continue(a: F32, b: F32, c: F32, ix: I64):
    for i in range(N):
        if c[i] > 0.0:
            continue
        a[i] = 1.0
    for i in range(N):
        b[i] = a[i] + 2.0  # runs for every i, the skipped ones too


def test_a_continue_in_the_first_task_ends_only_its_part_of_the_merged_task():
    d = only(run(task_level_continue)[0])
    assert (d.fused, d.reason) == (True, ft.FUSED_RAW)


def task_level_jumps_in_a_chain(a: F32, b: F32, c: F32, ix: I64):
    for i in range(N):
        if c[i] > 0.5:
            if c[i] > 1.0:
                continue
            a[i] = -1.0
            continue
        a[i] = 1.0
    for i in range(N):
        i_once = a[i] * 2.0  # a local named as the merged task's loop of one trip would be
        if i_once < 0.0:
            continue
        b[i] = i_once
    for i in range(N):
        c[i] += a[i] + b[i]


def test_continues_in_tasks_that_merge_in_a_chain():
    decisions, fused, unfused = run(task_level_jumps_in_a_chain)
    assert [d.fused for d in decisions] == [True, True] and (fused, unfused) == (1, 3)


def serial_between(a: F32, b: F32, c: F32, ix: I64):
    for i in range(N):
        a[i] = 1.0
    b[0] = 5.0
    for i in range(N):
        c[i] = 2.0


def test_serial_tasks_never_fuse():
    decisions, fused, _ = run(serial_between)
    assert [(d.fused, d.reason) for d in decisions] == [(False, ft.REJECT_SERIAL)] * 2
    assert fused == 3


# --- knobs --------------------------------------------------------------------------------------------
def test_raw_knob_off_keeps_only_disjoint_fusion():
    d = only(run(integrate, fuse_tasks_raw=False)[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_RAW_OFF)
    d = only(run(disjoint, fuse_tasks_raw=False)[0])
    assert d.fused


def test_kill_switch_and_per_kernel_opt_out():
    decisions, fused, _ = run(integrate, fuse_tasks=False)
    assert (decisions, fused) == ([], 2)
    opted_out = bz.kernel(fuse_tasks=False)(integrate)
    opted_out(*arrays())
    assert opted_out.decisions() == []


def test_cost_guard_rejects_large_merged_bodies():
    d = only(run(integrate, fuse_tasks_budget=10)[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_BUDGET)
    assert "nodes > 10" in d.detail


def test_overlapping_arguments_are_never_fused():
    def make():
        a, b, c, ix = arrays()
        return [a, a[1:], c, ix]  # b is a shifted view of a

    decisions, fused, unfused = run(neighbour, make)
    assert (decisions, fused, unfused) == ([], 2, 2)
    same = arrays()
    decisions, fused, _ = run(integrate, lambda: [same[0], same[0], same[2], same[3]])
    assert (decisions, fused) == ([], 2)


def test_diag_prints_one_line_per_pair_and_counts(capsys):
    run(chain, fuse_tasks_diag=True)
    run(different_bounds, fuse_tasks_diag=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if "fuse_tasks" in line]
    assert lines[0] == "braze: fuse_tasks chain: chain_t0 + chain_t1: fused: same-thread read-after-write " \
                       "(on a; 9 nodes)"
    assert "braze: fuse_tasks chain: 5 tasks -> 1; fused: same-thread read-after-write x4; budget 4000 nodes" in lines
    assert any(line.startswith("braze: fuse_tasks different_bounds: different_bounds_t0 + different_bounds_t1: "
                               "rejected: different bounds ([0, 16) vs [0, 15))") for line in lines)
    assert "braze: fuse_tasks different_bounds: 2 tasks -> 2; rejected: different bounds x1; budget 4000 nodes" \
        in lines


def test_environment_knobs_are_read():
    env = {"BRAZE_FUSE_TASKS": "0", "BRAZE_FUSE_TASKS_RAW": "0", "BRAZE_FUSE_TASKS_DIAG": "1",
           "BRAZE_FUSE_TASKS_BUDGET": "77"}
    knobs = config.Config.from_environment(env)
    assert (knobs.fuse_tasks, knobs.fuse_tasks_raw, knobs.fuse_tasks_diag, knobs.fuse_tasks_budget) == (
        False, False, True, 77)
    defaults = config.Config.from_environment({})
    assert (defaults.fuse_tasks, defaults.fuse_tasks_raw, defaults.fuse_tasks_diag) == (True, True, False)


def test_locals_of_the_second_task_are_renamed_apart():
    def make():
        return arrays()

    def clash(a: F32, b: F32, c: F32, ix: I64):
        for i in range(N):
            t = a[i] * 2.0
            a[i] = t
        for j in range(N):
            t = j * 3
            i = t + 1
            b[j] = i * 1.0

    _, fused, _ = run(clash, make)
    assert fused == 1


def rows(x: bz.Array[bz.float32, 2], v: bz.Array[bz.float32, 2]):
    for i in range(x.shape[0]):
        for d in bz.static(range(3)):
            v[i, d] = v[i, d] * 0.5
    for i in range(x.shape[0]):
        v[i, 1] -= 9.81
        for d in range(3):
            x[i, d] += v[i, d]


def rows_shifted(x: bz.Array[bz.float32, 2], v: bz.Array[bz.float32, 2]):
    for i in range(1, x.shape[0]):
        v[i, 0] = 1.0
    for i in range(1, x.shape[0]):
        x[i, 0] = v[i - 1, 0]


def test_rows_owned_by_one_thread_fuse_and_neighbour_rows_reject():
    def make():
        rng = np.random.default_rng(1)
        return [rng.standard_normal((6, 3)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)]

    d = only(run(rows, make)[0])
    assert (d.fused, d.reason) == (True, ft.FUSED_RAW)
    d = only(run(rows_shifted, make)[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_ADDRESSES)


def test_the_demo_particle_steps_fuse_into_one_launch():
    from braze.cli.particles import TWELVE_LOOPS, run_particle_step

    row = run_particle_step(n=100, steps=3, seconds=0.01)
    assert (row.launches_unfused, row.launches_fused, row.max_error) == (6, 1, 0.0)
    row = run_particle_step(n=100, steps=3, seconds=0.01, case=TWELVE_LOOPS)
    assert (row.launches_unfused, row.launches_fused, row.max_error) == (12, 1, 0.0)


def test_merged_tasks_are_named_after_their_first_and_last_task():
    kern = bz.kernel(chain)
    kern(*arrays())
    assert "task chain_t0__chain_t4: range_for i in [0, 16)" in kern.kernel_ir()


def test_a_body_that_assigns_the_loop_index_rejects():
    from braze.kir import nodes as k

    i = k.Var("i")
    a = k.ArrayParam("a", bz.float32, 1, (1,))
    store = k.Store(a, (i,), k.Const(1.0, bz.float32))
    first = k.Task("t0", "range_for", (k.Assign(i, k.Const(0, bz.int64)), store), i, k.Const(0, bz.int64),
                   k.Const(8, bz.int64))
    second = k.Task("t1", "range_for", (store,), i, k.Const(0, bz.int64), k.Const(8, bz.int64))
    kernel, decisions = ft.fuse_tasks(k.Kernel("manual", (a,), (first, second)))
    assert len(kernel.tasks) == 2
    assert (decisions[0].reason, decisions[0].detail) == (ft.REJECT_UNRECOGNISED, "the loop index is assigned")


def test_the_same_kernel_follows_the_knobs_it_is_called_under():
    kern = bz.kernel(integrate)
    args = arrays()
    for knob, launches in ((True, 1), (False, 2), (True, 1)):
        with config.scope(fuse_tasks=knob), bz.record() as rec:
            kern(*args)
            kern(*args)  # the replayed call too
        assert len(rec.launches) == 2 * launches


def reassigned_local(a: F32, b: F32, c: F32, ix: I64):
    for i in range(1, N):
        r = i
        a[r] = c[i]
        r = i - 1  # r now names another thread's element: its first definition must not stand for it
        a[r] = c[i] * 2.0
    for i in range(1, N):
        b[i] = a[i]


def test_a_reassigned_local_is_not_taken_for_its_first_value():
    d = only(run(reassigned_local)[0])
    assert (d.fused, d.reason, d.detail) == (False, ft.REJECT_NOT_INJECTIVE, "a[r]")


def grid_rows(a: bz.Array[bz.float32, 2], rows: bz.Array[bz.float32, 1]):
    for i, j in bz.ndrange(a.shape[0], a.shape[1]):
        rows[i] = a[i, j]  # every j of row i writes rows[i]
    for i, j in bz.ndrange(a.shape[0], a.shape[1]):
        a[i, j] = rows[i] * 2.0


def test_an_ndrange_row_index_alone_is_not_injective():
    def make():
        return [np.arange(35, dtype=np.float32).reshape(5, 7), np.zeros(5, np.float32)]

    d = only(run(grid_rows, make)[0])
    assert (d.fused, d.reason) == (False, ft.REJECT_NOT_INJECTIVE)
