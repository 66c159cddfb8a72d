"""Generated loop programs over vectors and in-kernel random numbers: arrays of vec3, vector locals,
components read and written, a local array of vec3 (`bz.local`), `bz.dot`/`cross`/`length`/`normalize`,
an array of mat33 (a matrix or its transpose times a vector, determinants), `bz.random.uniform`/`normal`,
atomic vector updates and `if`s, in 1 to 4 tasks.

Each program runs three ways: fused, with `BRAZE_FUSE_TASKS=0`, and as plain Python over NumPy
(the kernel body is Python: vectors are NumPy arrays there, and the vector functions and
`bz.random` have NumPy forms computing the same values, operation by operation). The arrays are
small, so the CPU runs each task on one thread in index order and the atomics add in that order
too. All three must leave bit-identical arrays. tests/codegen/test_cuda_loops.py compiles some of
these programs with NVRTC; tests/cuda/test_loop_kernels.py runs some on a GPU against the CPU.
"""

from __future__ import annotations

import itertools
import linecache
import os

import numpy as np
from fuzz_scale import examples
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import braze as bz
from braze import config

# BRAZE_FUZZ_LOOP_EXAMPLES=n runs n programs instead of 40 (a longer hunt).
EXAMPLES = int(os.environ.get("BRAZE_FUZZ_LOOP_EXAMPLES") or examples(40))
N = 12  # loop bound and array length
READS = ["i", "n - 1 - i", "i // 2", "0", "i % 3"]  # owned, and not
CONSTANTS = ["0.5", "-1.25", "2.0"]
_counter = itertools.count()


@st.composite
def scalars(draw, arrays: int, depth: int = 0):
    """A float32 scalar expression, as (kernel text, Python text)."""
    kind = draw(st.sampled_from(["const", "s", "random", "component", "dot", "length", "op", "determinant"]
                                if depth < 2 else ["const", "s", "random"]))
    if kind == "const":
        text = draw(st.sampled_from(CONSTANTS))
        return text, text
    if kind == "s":
        text = f"s[{draw(st.sampled_from(READS))}]"
        return text, text
    if kind == "random":
        text = draw(st.sampled_from(["bz.random.uniform(seed, i)", "bz.random.normal(seed, 2 * i + 1, 3)",
                                     "bz.random.uniform(seed, n + i, 1)"]))
        return text, text
    if kind == "determinant":
        text = f"bz.determinant(m[{draw(st.sampled_from(READS))}])"
        return text, text
    if kind == "component":
        k, p = draw(vectors(arrays, depth + 1))
        c = draw(st.integers(0, 2))
        named = draw(st.booleans())
        return (f"({k}).{'xyz'[c]}" if named else f"({k})[{c}]"), f"({p})[{c}]"
    if kind in ("dot", "length"):
        (k1, p1), (k2, p2) = draw(vectors(arrays, depth + 1)), draw(vectors(arrays, depth + 1))
        if kind == "dot":
            return f"bz.dot({k1}, {k2})", f"bz.dot({p1}, {p2})"
        return f"bz.length({k1})", f"bz.length({p1})"
    op = draw(st.sampled_from(["+", "-", "*"]))
    (k1, p1), (k2, p2) = draw(scalars(arrays, depth + 1)), draw(scalars(arrays, depth + 1))
    return f"({k1} {op} {k2})", f"({p1} {op} {p2})"


@st.composite
def vectors(draw, arrays: int, depth: int = 0, local: bool = False):
    """A vec3 expression, as (kernel text, Python text)."""
    leaves = ["array", "array", "construct"] + (["local"] if local else [])
    kind = draw(st.sampled_from(leaves + ["add", "sub", "scale", "neg", "cross", "normalize", "matrix"] if depth < 2
                                else leaves))
    if kind == "array":
        text = f"x{draw(st.integers(0, arrays - 1))}[{draw(st.sampled_from(READS))}]"
        return text, f"cp({text})"  # a copy: a NumPy row is a view, a kernel's vector a value
    if kind == "local":
        return "w", "w"
    if kind == "construct":
        parts = [draw(scalars(arrays, depth + 1)) for _ in range(3)]
        return (f"bz.vec3({', '.join(k for k, _ in parts)})", f"bz.vec3({', '.join(p for _, p in parts)})")
    if kind in ("add", "sub"):
        (k1, p1), (k2, p2) = draw(vectors(arrays, depth + 1, local)), draw(vectors(arrays, depth + 1, local))
        op = "+" if kind == "add" else "-"
        return f"({k1} {op} {k2})", f"({p1} {op} {p2})"
    if kind == "scale":
        (k1, p1), (k2, p2) = draw(vectors(arrays, depth + 1, local)), draw(scalars(arrays, depth + 1))
        return f"({k1} * {k2})", f"({p1} * {p2})"
    if kind == "neg":
        k1, p1 = draw(vectors(arrays, depth + 1, local))
        return f"-({k1})", f"-({p1})"
    (k1, p1) = draw(vectors(arrays, depth + 1, local))
    if kind == "matrix":  # a row of m, or its transpose, times the vector: each component a bz.dot of a row
        row, transposed = draw(st.sampled_from(READS)), draw(st.booleans())
        matrix = f"bz.transpose(m[{row}])" if transposed else f"m[{row}]"
        return f"({matrix} @ {k1})", f"rows_times({matrix}, {p1})"
    if kind == "normalize":
        return f"bz.normalize({k1})", f"bz.normalize({p1})"
    k2, p2 = draw(vectors(arrays, depth + 1, local))
    return f"bz.cross({k1}, {k2})", f"bz.cross({p1}, {p2})"


@st.composite
def statements(draw, arrays: int, depth: int = 0):
    """Lines of one statement, as (kernel lines, Python lines)."""
    kinds = ["store", "update", "component", "scalar", "local", "atomic", "buffer"] + (["if"] if depth == 0 else [])
    kind = draw(st.sampled_from(kinds))
    target = f"x{draw(st.integers(0, arrays - 1))}[i]"
    if kind in ("store", "update"):
        k, p = draw(vectors(arrays))
        op = "=" if kind == "store" else draw(st.sampled_from(["+=", "-="]))
        return [f"{target} {op} {k}"], [f"{target} {op} {p}"]
    if kind == "component":
        c = draw(st.integers(0, 2))
        k, p = draw(scalars(arrays))
        return [f"{target}.{'xyz'[c]} = {k}"], [f"{target}[{c}] = {p}"]
    if kind == "scalar":
        k, p = draw(scalars(arrays))
        return [f"s[i] = {k}"], [f"s[i] = {p}"]
    if kind == "local":
        (k1, p1), (k2, p2) = draw(vectors(arrays)), draw(vectors(arrays, local=True))
        return [f"w = {k1}", f"{target} = {k2}"], [f"w = {p1}", f"{target} = {p2}"]
    if kind == "buffer":  # through the task's local array of vec3s, a whole one or a component
        k, p = draw(vectors(arrays))
        slot, other = (draw(st.sampled_from(["0", "1", "i % 2"])) for _ in range(2))
        c, (ks, ps) = draw(st.integers(0, 2)), draw(scalars(arrays))
        return ([f"buf[{slot}] = {k}", f"buf[{other}].{'xyz'[c]} = {ks}", f"{target} += buf[{slot}]"],
                [f"buf[{slot}] = {p}", f"buf[{other}][{c}] = {ps}", f"{target} += buf[{slot}]"])
    if kind == "atomic":
        k, p = draw(vectors(arrays))
        return [f"bins[i % 4] += {k}"], [f"bins[i % 4] += {p}"]
    (k1, p1), (k2, p2) = draw(scalars(arrays)), draw(scalars(arrays))
    then_k, then_p = draw(statements(arrays, depth + 1))
    else_k, else_p = draw(statements(arrays, depth + 1))
    return ([f"if {k1} > {k2}:", *("    " + s for s in then_k), "else:", *("    " + s for s in else_k)],
            [f"if {p1} > {p2}:", *("    " + s for s in then_p), "else:", *("    " + s for s in else_p)])


@st.composite
def programs(draw):
    arrays = draw(st.integers(1, 3))
    tasks = []
    for _ in range(draw(st.integers(1, 4))):
        body = [draw(statements(arrays)) for _ in range(draw(st.integers(1, 3)))]
        tasks.append(([line for k, _ in body for line in k], [line for _, p in body for line in p]))
    return arrays, tasks


def render(arrays: int, tasks, python: bool) -> str:
    params = ", ".join(f"x{a}: V3" for a in range(arrays))
    lines = [f"def program({params}, s: F32, bins: V3, m: M33, seed: int, n: int):"]
    for kernel_lines, python_lines in tasks:
        lines += ["    for i in range(n):", "        buf = bz.local(bz.vec3, 2)"]
        lines += [f"        {line}" for line in (python_lines if python else kernel_lines)]
    return "\n".join(lines) + "\n"


def rows_times(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """A matrix times a vector in Python, as a kernel computes it: a bz.dot of each row."""
    return bz.vec3(*(bz.dot(row, vector) for row in matrix))


def load(source: str):
    filename = f"<braze-vector-fuzz {next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"bz": bz, "np": np, "cp": np.array, "V3": bz.Array[bz.vec3, 1], "F32": bz.Array[bz.float32, 1],
                 "M33": bz.Array[bz.mat33, 1], "rows_times": rows_times}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["program"]


def inputs(arrays: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    data = [rng.uniform(-2, 2, (N, 3)).astype(np.float32) for _ in range(arrays)]
    matrices = rng.uniform(-1, 1, (N, 3, 3)).astype(np.float32)
    return [*data, rng.uniform(-2, 2, N).astype(np.float32), np.zeros((4, 3), np.float32), matrices, seed, N]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31))
def test_fused_unfused_and_python_agree(program, seed):
    arrays, tasks = program
    note(render(arrays, tasks, python=False))
    fused, unfused, expected = (inputs(arrays, seed) for _ in range(3))
    kernel_fn = load(render(arrays, tasks, python=False))
    bz.kernel(kernel_fn)(*fused)
    with config.scope(fuse_tasks=False):
        bz.kernel(kernel_fn)(*unfused)
    with np.errstate(all="ignore"):
        load(render(arrays, tasks, python=True))(*expected)
    for got, off, want in zip(fused[:-3], unfused[:-3], expected[:-3]):
        np.testing.assert_array_equal(off, want)
        np.testing.assert_array_equal(got, off)
