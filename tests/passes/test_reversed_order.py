"""`BRAZE_ENABLE=reverse_parallel`: the CPU runs each parallel loop from its last index to its first, on
one thread, so a loop kernel whose answer depends on the order of its iterations (a data race on a
GPU) shows it on the CPU."""

import itertools
import linecache

import numpy as np
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import braze as bz
from braze import config

REVERSED = {"enable": "reverse_parallel"}


@bz.kernel
def arrival_order(order: bz.Array[bz.int64, 1], counter: bz.Array[bz.int64, 1]):
    for i in range(order.shape[0]):
        order[i] = bz.atomic_add(counter[0], 1)


def _arrivals(n: int, **knobs) -> np.ndarray:
    order, counter = np.zeros(n, np.int64), np.zeros(1, np.int64)
    with config.scope(**knobs):
        arrival_order(order, counter)
    return order


def test_indices_run_last_to_first_on_one_thread():
    n = 1 << 20  # enough work that the pool splits the range in increasing order
    np.testing.assert_array_equal(_arrivals(n, **REVERSED), np.arange(n)[::-1])
    small = _arrivals(9)
    np.testing.assert_array_equal(small, np.arange(9))  # the knob is part of the compiled code's key


@bz.kernel
def smooth_in_place(a: bz.Array[bz.float64, 1]):
    for i in range(1, a.shape[0] - 1):
        a[i] = a[i - 1] + a[i + 1]  # reads elements other iterations write: a race by nature


def test_a_loop_racing_with_itself_gives_another_answer():
    forward, backward = np.arange(8.0), np.arange(8.0)
    smooth_in_place(forward)
    with config.scope(**REVERSED):
        smooth_in_place(backward)
    np.testing.assert_array_equal(forward, [0, 2, 5, 9, 14, 20, 27, 7])
    np.testing.assert_array_equal(backward, [0, 22, 22, 21, 19, 16, 12, 7])


# --- generated loop programs whose every loop is race-free by construction ------------------------
# Each loop gives each array one role: written at one index of its own (stored there, and read only
# there), updated in place at neighbours' elements (`+=` and `-=` only, so atomic and in any order the
# same sum), or only read, anywhere. Its answer then depends on no order of its iterations, and the
# program's on no merge of its loops that task fusion may make: fused in increasing and decreasing
# order, and unfused, all must agree (up to the rounding of float sums added in another order).
N = 12  # loop bound
SIZE = 2 * N + 4  # every index below stays in [0, SIZE)
OWN_INDICES = ["i", "i + 1", "i - 1", "n - 1 - i", "2 * i"]  # injective: a thread's own element
ANY_INDICES = ["i", "i + 1", "i - 1", "i + 2", "n - 1 - i", "i // 2", "2 * i", "2 * i + 1", "ix[i]"]
BOUNDS = ["1, n"] * 5 + ["1, n - 1"]


@st.composite
def loops(draw, arrays: int):
    roles = [draw(st.sampled_from(["read", "written", "written", "updated"])) for _ in range(arrays)]
    own = [draw(st.sampled_from(OWN_INDICES)) for _ in range(arrays)]

    def value(depth: int = 0) -> str:
        choice = draw(st.integers(0, 3 if depth < 2 else 1))
        if choice == 1:
            return draw(st.sampled_from(["0.5", "-1.25", "2.0"]))
        if choice == 0:
            readable = [a for a in range(arrays) if roles[a] != "updated"]
            if not readable:
                return "0.75"
            a = draw(st.sampled_from(readable))
            index = own[a] if roles[a] == "written" else draw(st.sampled_from(ANY_INDICES))
            return f"a{a}[{index}]"
        return f"({value(depth + 1)} {draw(st.sampled_from(['+', '-', '*']))} {value(depth + 1)})"

    def statement(depth: int = 0) -> list[str]:
        kind = draw(st.sampled_from(["write", "write", "write", "if", "serial", "skip"] if depth == 0 else ["write"]))
        if kind == "if":
            return [f"if {value()} > {value()}:", *(f"    {s}" for s in statement(1)),
                    "else:", *(f"    {s}" for s in statement(1))]
        if kind == "serial":  # a serial loop in the parallel one
            return ["for k in range(2):", *(f"    {s}" for s in statement(1))]
        if kind == "skip":
            return [f"if {value()} > 1.5:", "    continue"]
        targets = [a for a in range(arrays) if roles[a] in ("written", "updated")]
        if not targets:
            return [f"t = {value()}"]
        a = draw(st.sampled_from(targets))
        if roles[a] == "written":
            return [f"a{a}[{own[a]}] = {value()}"]
        return [f"a{a}[{draw(st.sampled_from(ANY_INDICES))}] {draw(st.sampled_from(['+=', '-=']))} {value()}"]

    body = [line for _ in range(draw(st.integers(1, 3))) for line in statement()]
    return draw(st.sampled_from(BOUNDS)), body


@st.composite
def race_free_programs(draw):
    arrays = draw(st.integers(1, 2))
    return arrays, [draw(loops(arrays)) for _ in range(draw(st.integers(2, 4)))]


def render(arrays: int, program) -> str:
    lines = [f"def program({', '.join(f'a{a}: F64' for a in range(arrays))}, ix: I64, n: int):"]
    for bounds, body in program:
        lines += [f"    for i in range({bounds}):", *(f"        {line}" for line in body)]
    return "\n".join(lines) + "\n"


_programs = itertools.count()


def load(source: str):
    filename = f"<braze-reversed {next(_programs)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"F64": bz.Array[bz.float64, 1], "I64": bz.Array[bz.int64, 1]}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["program"]


def inputs(arrays: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [*(rng.uniform(-2, 2, SIZE) for _ in range(arrays)), rng.integers(0, SIZE, SIZE), N]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(race_free_programs(), st.integers(0, 2**31))
def test_race_free_loops_agree_fused_in_both_orders_and_unfused(program, seed):
    arrays, loops_ = program
    source = render(arrays, loops_)
    note(source)
    fn = load(source)
    expected = inputs(arrays, seed)
    fn(*expected)  # as plain Python: one loop after another, each in increasing order
    for knobs in ({}, REVERSED, {"fuse_tasks": False}, {**REVERSED, "fuse_tasks": False}):
        got = inputs(arrays, seed)
        with config.scope(**knobs):
            bz.kernel(fn)(*got)
        for a in range(arrays):
            np.testing.assert_allclose(got[a], expected[a], rtol=1e-12, atol=1e-12, err_msg=f"a{a} under {knobs}")
