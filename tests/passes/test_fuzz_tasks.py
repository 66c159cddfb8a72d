"""Differential fuzzing of task fusion: random loop programs of 2 to 8 tasks over 1 to 4 arrays (1-d to
3-d; 2-d ones sometimes sliding windows over one buffer), with index expressions the fuser accepts
and ones it must reject, random arithmetic and `if`s, and atomic adds, subtractions, minima and maxima
(`bz.atomic_max(a0[0], ...)`) on elements every thread may share.

Each program runs three ways: fused, with `BRAZE_FUSE_TASKS=0`, and as plain Python over NumPy
(the kernel body is Python; its loops then run one index after another). All three must leave
bit-identical arrays. The arrays are small, so the CPU runs every task on one thread in index
order, and the unfused kernel is deterministic even where a task races with itself.
"""

import itertools
import linecache
import os

import numpy as np
from fuzz_scale import examples
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

import braze as bz
from braze import config

# BRAZE_FUZZ_LOOP_EXAMPLES=n runs n programs instead of 50, here and in test_fuzz_vector_programs.py (a
# longer hunt; split it over processes with different --hypothesis-seed values).
EXAMPLES = int(os.environ.get("BRAZE_FUZZ_LOOP_EXAMPLES") or examples(50))
N = 16  # loop bound; a power of two so i ^ 5 < N
SIZE = 2 * N + 8  # every index form below stays in [0, SIZE)
INDICES = ["i", "i + 3", "2 * i", "n - 1 - i", "i ^ 5", "i << 1",  # injective
           "i // 2", "i % 2", "min(i, 5)", "i & 1", "0", "i - 1", "ix[i]"]  # not, or indirect
CONSTANTS = ["0.5", "2.0", "-1.25", "3.0"]
_counter = itertools.count()


COLUMNS = ["0", "1", "i % 2", "1 - i % 2"]  # the indices after the row of 2-d and 3-d arrays


@st.composite
def indices(draw, favourite: str, columns: int):
    """Mostly the program's favourite index, so that some pairs can fuse; any index otherwise."""
    row = favourite if draw(st.integers(0, 19)) < 17 else draw(st.sampled_from(INDICES))
    return ", ".join([row, *(draw(st.sampled_from(COLUMNS)) for _ in range(columns))])


@st.composite
def expressions(draw, arrays: int, favourite: str, columns: int, depth: int = 0):
    if depth >= 2 or draw(st.booleans()):
        if draw(st.integers(0, 3)) == 0:
            return draw(st.sampled_from(CONSTANTS))
        return f"a{draw(st.integers(0, arrays - 1))}[{draw(indices(favourite, columns))}]"
    op = draw(st.sampled_from(["+", "-", "*", "neg"]))
    left = draw(expressions(arrays, favourite, columns, depth + 1))
    if op == "neg":
        return f"-({left})"
    return f"({left} {op} {draw(expressions(arrays, favourite, columns, depth + 1))})"


@st.composite
def statements(draw, arrays: int, favourite: str, columns: int, depth: int = 0):
    kinds = ["store", "store", "update", "atomic", "if", "local"] if depth == 0 else ["store", "update", "local"]
    kind = draw(st.sampled_from(kinds))
    target = f"a{draw(st.integers(0, arrays - 1))}[{draw(indices(favourite, columns))}]"
    value = draw(expressions(arrays, favourite, columns))
    if kind == "store":
        return [f"{target} = {value}"]
    if kind == "local":  # the row index through a local (reused names are reassigned: opaque to the fuser)
        name = f"r{draw(st.integers(0, 1))}"
        row = draw(st.sampled_from([favourite, draw(st.sampled_from(INDICES))]))
        column = "".join(f", {draw(st.sampled_from(COLUMNS))}" for _ in range(columns))
        return [f"{name} = {row}", f"a{draw(st.integers(0, arrays - 1))}[{name}{column}] = {value}"]
    if kind == "update":
        return [f"{target} += {value}"]
    if kind == "atomic":  # counts into h, or a running min or max of values: either is the same in any order
        if draw(st.booleans()):
            op, amount = draw(st.sampled_from(["add", "sub", "min", "max"])), draw(st.sampled_from(["1", "3", "-2"]))
            return [f"@atomic|{op}|h[{draw(indices(favourite, False))}]|{amount}"]
        return [f"@atomic|{draw(st.sampled_from(['min', 'max']))}|{target}|{value}"]
    condition = f"{value} > {draw(expressions(arrays, favourite, columns))}"
    then = draw(statements(arrays, favourite, columns, depth + 1))
    orelse = draw(statements(arrays, favourite, columns, depth + 1))
    return [f"if {condition}:", *[f"    {s}" for s in then], "else:", *[f"    {s}" for s in orelse]]


@st.composite
def programs(draw):
    arrays = draw(st.integers(1, 4))
    favourite = draw(st.sampled_from(INDICES[:6] * 2 + INDICES[6:]))  # injective ones more often
    columns = draw(st.integers(0, 2))  # the data arrays' axes after the row: 1-d, 2-d or 3-d arrays
    # 2-d data arrays as sliding windows over one buffer each: a[i, 1] is a[i + 1, 0]
    overlapping = columns == 1 and draw(st.integers(0, 3)) == 0
    tasks = []
    for _ in range(draw(st.integers(2, 8))):
        bounds = draw(st.sampled_from(["1, n"] * 5 + ["1, n - 1"]))
        body = [line for _ in range(draw(st.integers(1, 3))) for line in draw(statements(arrays, favourite, columns))]
        tasks.append((bounds, body))
    return arrays, columns, overlapping, tasks


def atomic_update(op: str, target: str, value: str, atomics: bool) -> str:
    """`bz.atomic_<op>(target, value)`, or what it does written in Python."""
    if atomics:
        return f"bz.atomic_{op}({target}, {value})"
    if op in ("min", "max"):  # a float minimum or maximum takes the number where one side is NaN
        return f"{target} = np.f{op}({target}, {value})"
    return f"{target} {'+' if op == 'add' else '-'}= {value}"


def render(arrays: int, columns: int, tasks, atomics: bool) -> str:
    params = ", ".join(f"a{k}: {('F32', 'F32_2D', 'F32_3D')[columns]}" for k in range(arrays))
    lines = [f"def program({params}, ix: I64, h: I64, n: int):"]
    for bounds, body in tasks:
        lines.append(f"    for i in range({bounds}):")
        for line in body:
            indent = line[: len(line) - len(line.lstrip())]
            text = line.strip()
            if text.startswith("@atomic|"):
                text = atomic_update(*text.split("|")[1:], atomics)
            lines.append(f"        {indent}{text}")
    return "\n".join(lines) + "\n"


def load(source: str):
    filename = f"<braze-fuzz {next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"bz": bz, "np": np, "F32": bz.Array[bz.float32, 1], "F32_2D": bz.Array[bz.float32, 2],
                 "F32_3D": bz.Array[bz.float32, 3],
                 "I64": bz.Array[bz.int64, 1]}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["program"]


def inputs(arrays: int, columns: int, overlapping: bool, seed: int):
    rng = np.random.default_rng(seed)
    if overlapping:
        data = [sliding_window_view(rng.uniform(-2, 2, SIZE + 1).astype(np.float32), 2, writeable=True)
                for _ in range(arrays)]
    else:
        data = [rng.uniform(-2, 2, (SIZE,) + (2,) * columns).astype(np.float32) for _ in range(arrays)]
    return data + [rng.integers(0, SIZE, SIZE).astype(np.int64), np.zeros(SIZE, np.int64), N]


# Squares overflow to inf, inf - inf is NaN, and the atomic minimum of NaN and 0.5 is 0.5 (as fmin).
NAN_TARGET = (1, 0, False, [("1, n", ["a0[i % 2] = ((0.5 + a0[i % 2]) * (0.5 + a0[i % 2]))"]),
                            ("1, n", ["a0[i % 2] = ((0.5 + 0.5) + (a0[i % 2] - a0[i % 2]))"]),
                            ("1, n", ["@atomic|min|a0[i % 2]|0.5"])])


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31))
@example(NAN_TARGET, 0)
def test_fused_unfused_and_python_agree(program, seed):
    arrays, columns, overlapping, tasks = program
    note(render(arrays, columns, tasks, atomics=True) + ("(sliding-window arguments)" if overlapping else ""))
    kernel_fn = load(render(arrays, columns, tasks, atomics=True))
    python_fn = load(render(arrays, columns, tasks, atomics=False))
    fused, unfused, expected = (inputs(arrays, columns, overlapping, seed) for _ in range(3))
    kernel = bz.kernel(kernel_fn)
    with bz.record() as rec:
        kernel(*fused)
    with config.scope(fuse_tasks=False):
        bz.kernel(kernel_fn)(*unfused)
    with np.errstate(all="ignore"):
        python_fn(*expected)
    event(f"launches {len(tasks)} -> {len(rec.launches)}")
    for got, off, want in zip(fused[:-1], unfused[:-1], expected[:-1]):
        np.testing.assert_array_equal(off, want)
        np.testing.assert_array_equal(got, off)
    if overlapping:
        assert len(rec.launches) == len(tasks), "an argument overlapping itself keeps every loop its own launch"
