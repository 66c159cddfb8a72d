"""Generated loop programs over a grid, in Taichi's idioms: `bz.grouped(bz.ndrange(...))` loops whose
index is an integer vector, neighbours read through a clamped offset vector, integer vectors
(`bz.vec2i`, `I // 2`, `.cast(int)`, `bz.math.floor(v, int)`) and their `.sum()`/`.max()`, bool
vectors with `.all()`/`.any()`, `bz.cast`, `bz.vec2.zero()`, a module-level constant vector,
`v.norm(eps)`, a `@bz.func` helper, conditional expressions and atomic sums, maxima and minima into shared places, in 1
to 3 tasks.

Each program runs fused, with `BRAZE_FUSE_TASKS=0`, and as plain Python over NumPy (a second spelling
of the same body: an index vector is a NumPy array there); a few also run as the generated CUDA code on
the CPU (tests/loop_cuda_on_cpu.py). Integers must agree exactly, floats within float32 rounding (the
Python spelling rounds a literal's arithmetic in float64). A task writes one of two arrays and reads
the other's neighbours, which an earlier task may have written: fusing the tasks must not change what
it reads.
"""

from __future__ import annotations

import itertools
import linecache
import os

import loop_cuda_on_cpu
import numpy as np
import pytest
from fuzz_scale import SCALE, examples
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import braze as bz
from braze import config

# BRAZE_FUZZ_LOOP_EXAMPLES=n runs n programs instead of 10 (a longer hunt).
EXAMPLES = int(os.environ.get("BRAZE_FUZZ_LOOP_EXAMPLES") or examples(10))
CUDA_ON_CPU_SCALE = 5  # each such program compiles with g++ for seconds: off CI, from this BRAZE_FUZZ_SCALE on
UPPER = bz.vec2(1.5, -0.5)  # a module-level constant vector
CONSTANTS = ["0.5", "-1.25", "2.0"]
OFFSETS = [(-1, 0), (0, 1), (1, 1), (-1, -1)]
EPSILONS = ["1e-3", "0.25"]
_counter = itertools.count()


def _pair(kernel: str, python: str | None = None) -> tuple[str, str]:
    return kernel, kernel if python is None else python


def _neighbour(draw, array: str) -> tuple[str, str]:
    o = draw(st.sampled_from(OFFSETS))
    return (f"{array}[min(max(I + bz.vec2i{o}, 0), top)]",
            f"{array}[T(np.minimum(np.maximum(I + np.array({o}), 0), top))]")


@st.composite
def floats(draw, other: str, depth: int = 0):
    """A float32 expression, as (kernel text, Python text); `other` is the array read at neighbours."""
    kinds = ["const", "g", "neighbour", "index", "upper"]
    kind = draw(st.sampled_from(kinds + ["op", "norm", "normalized", "helper", "vector_helper", "select", "int"]
                                if depth < 2 else kinds))
    if kind == "const":
        return _pair(draw(st.sampled_from(CONSTANTS)))
    if kind == "g":
        return "g[I]", "g[T(I)]"
    if kind == "neighbour":
        return _neighbour(draw, draw(st.sampled_from(["g", other])))
    if kind == "index":
        return "bz.cast(I.sum(), bz.float32)", "np.float32(I.sum())"
    if kind == "upper":
        c = draw(st.integers(0, 1))
        return f"UPPER.{'xy'[c]}", f"UPPER[{c}]"
    if kind == "int":
        k, p = draw(ints(other, depth + 1))
        return f"bz.cast({k}, bz.float32)", f"np.float32({p})"
    if kind == "select":
        (kb, pb), (k1, p1), (k2, p2) = draw(bools(other, depth + 1)), *(draw(floats(other, depth + 1))
                                                                         for _ in range(2))
        return f"({k1} if {kb} else {k2})", f"({p1} if {pb} else {p2})"
    (k1, p1), (k2, p2) = draw(floats(other, depth + 1)), draw(floats(other, depth + 1))
    if kind == "norm":
        eps = draw(st.sampled_from(EPSILONS))
        zero = draw(st.booleans())
        return (f"(bz.vec2({k1}, {k2}){' + bz.vec2.zero()' if zero else ''}).norm({eps})",
                f"norm_eps({p1}, {p2}, {eps})")
    if kind == "normalized":
        c, eps = draw(st.integers(0, 1)), draw(st.sampled_from(EPSILONS))
        return f"bz.vec2({k1}, {k2}).normalized({eps})[{c}]", f"normalized_eps({p1}, {p2}, {eps})[{c}]"
    if kind == "helper":
        return f"blend({k1}, {k2})", f"blend({p1}, {p2})"
    if kind == "vector_helper":
        c = draw(st.integers(0, 1))
        return f"mix(bz.vec2({k1}, {k2}), UPPER).{'xy'[c]}", f"mix(vec2f({p1}, {p2}), UPPER)[{c}]"
    op = draw(st.sampled_from(["+", "-", "*"]))
    return f"({k1} {op} {k2})", f"({p1} {op} {p2})"


@st.composite
def ints(draw, other: str, depth: int = 0):
    """An integer expression, from the index vector and exact casts of the input."""
    kinds = ["component", "sum", "max", "mixed", "negative", "clamped", "cast", "vector_cast", "floor"]
    kind = draw(st.sampled_from(kinds + ["op"] if depth < 2 else kinds))
    c = draw(st.integers(0, 1))
    if kind == "component":
        return f"I[{c}]", f"I[{c}]"
    if kind in ("sum", "max"):
        return _pair(f"I.{kind}()")
    if kind == "mixed":
        return f"(I // 2 + I % 3 * bz.vec2i(1, -2)).{'xy'[c]}", f"(I // 2 + I % 3 * np.array([1, -2]))[{c}]"
    if kind == "negative":  # Python's floor division and modulo of negative integers, component by component
        d = draw(st.sampled_from(["2", "-3", "bz.vec2i(2, -3)"]))
        pd = d.replace("bz.vec2i(2, -3)", "np.array([2, -3])")
        return f"((I - 3) // {d} + (I - 2) % {d}).{'xy'[c]}", f"((I - 3) // {pd} + (I - 2) % {pd})[{c}]"
    if kind == "clamped":
        return (f"(bz.math.min(I, bz.vec2i(1, 1)) + abs(I - 2)).{'xy'[c]} - (-I).min()",
                f"(np.minimum(I, 1) + abs(I - 2))[{c}] - (-I).min()")
    if kind == "cast":  # g[I] * 2 is exact in float32: its truncation never flips
        return "bz.cast(g[I] * 2.0, bz.int32)", "bz.cast(g[T(I)] * np.float32(2.0), bz.int32)"
    if kind == "vector_cast":
        return f"(bz.vec2(g[I], g[I] * 4.0)).cast(int)[{c}]", f"bz.cast(vec2f(g[T(I)], g[T(I)] * 4), int)[{c}]"
    if kind == "floor":
        return (f"bz.math.floor(bz.vec2(g[I], -1.5) + UPPER, int).{'xy'[c]}",
                f"bz.math.floor(vec2f(g[T(I)], -1.5) + UPPER, int)[{c}]")
    (k1, p1), (k2, p2) = draw(ints(other, depth + 1)), draw(ints(other, depth + 1))
    op = draw(st.sampled_from(["+", "-", "*"]))
    return f"({k1} {op} {k2})", f"({p1} {op} {p2})"


@st.composite
def bools(draw, other: str, depth: int = 0):
    """A condition: a comparison of index vectors combined by .all()/.any(), of the input with a
    constant (exact), or of an integer's parity."""
    kind = draw(st.sampled_from(["all", "any", "input", "vector_input", "parity"]))
    if kind == "vector_input":  # a float vector of exact values against a constant one
        which = draw(st.sampled_from(["all", "any"]))
        return (f"(bz.vec2(g[I], -g[I]) > UPPER).{which}()",
                f"bool((vec2f(g[T(I)], -g[T(I)]) > UPPER).{which}())")
    if kind in ("all", "any"):
        op, bound = draw(st.sampled_from([">=", "<", "=="])), draw(st.sampled_from(["1", "bz.vec2i(2, 1)", "top"]))
        python_bound = "np.array([2, 1])" if bound.startswith("bz.") else bound
        return f"(I {op} {bound}).{kind}()", f"bool((I {op} {python_bound}).{kind}())"
    if kind == "input":
        c = draw(st.sampled_from(["0.0", "-0.5", "UPPER.x"]))
        return f"g[I] > {c}", f"g[T(I)] > {c.replace('UPPER.x', 'UPPER[0]')}"
    k, p = draw(ints(other, depth + 1))
    return f"({k}) % 2 == 0", f"({p}) % 2 == 0"


@st.composite
def statements(draw, target: str, other: str, depth: int = 0):
    """Lines of one statement, as (kernel lines, Python lines)."""
    kind = draw(st.sampled_from(["store", "update", "flag", "atomic", "extreme", "local"]
                                + (["if", "stencil", "walk"] if depth == 0 else [])))
    if kind in ("store", "update"):
        k, p = draw(floats(other))
        op = "=" if kind == "store" else "+="
        return [f"{target}[I] {op} {k}"], [f"{target}[T(I)] {op} {p}"]
    if kind == "flag":
        k, p = draw(ints(other))
        return [f"flags[I] = {k}"], [f"flags[T(I)] = {p}"]
    if kind == "atomic":  # many cells add into one place
        slot = draw(st.sampled_from(["0", "I[0] % 4", "I.sum() % 2 + 2"]))
        k, p = draw(floats(other))
        return [f"acc[{slot}] += {k}"], [f"acc[{slot}] += {p}"]
    if kind == "extreme":
        # places of their own: a max after an add on one place depends on the order the threads run
        which = draw(st.sampled_from(["max", "min"]))
        slot = draw(st.sampled_from(["4", "4 + I[1] % 2"] if which == "max" else ["6", "6 + I[1] % 2"]))
        k, p = draw(floats(other))
        return [f"bz.atomic_{which}(acc[{slot}], {k})"], [f"acc[{slot}] = {which}(acc[{slot}], np.float32({p}))"]
    if kind == "walk":  # an integer vector local stepped in a loop, clamped back inside the grid
        step = draw(st.sampled_from(["bz.vec2i(1, -1)", "bz.vec2i(-1, 0)", "I % 2"]))
        python_step = {"bz.vec2i(1, -1)": "np.array([1, -1])", "bz.vec2i(-1, 0)": "np.array([-1, 0])"}.get(step, step)
        return (["p = I + 0", "for _ in range(2):", f"    p = min(max(p + {step}, 0), top)",
                 f"{target}[I] = g[p] + bz.cast(p.sum(), bz.float32)"],
                ["p = I + 0", "for _ in range(2):", f"    p = np.minimum(np.maximum(p + {python_step}, 0), top)",
                 f"{target}[T(I)] = g[T(p)] + np.float32(p.sum())"])
    if kind == "stencil":  # a neighbour loop, serial or unrolled, over an offset vector
        unrolled = draw(st.booleans())
        k, p = draw(floats(other, 1))
        loop = "bz.grouped(bz.ndrange((-1, 2), (-1, 2)))"
        return ([f"s = {k}", f"for off in {f'bz.static({loop})' if unrolled else loop}:",
                 f"    s += {other}[min(max(I + off, 0), top)] * (1.0 if (off == 0).all() else 0.5)",
                 f"{target}[I] = s"],
                [f"s = np.float32({p})", f"for off in {loop}:",
                 f"    s += {other}[T(np.minimum(np.maximum(I + off, 0), top))] * (1.0 if (off == 0).all() else 0.5)",
                 f"{target}[T(I)] = s"])
    if kind == "local":
        (k1, p1), (k2, p2) = draw(floats(other)), draw(floats(other))
        c = draw(st.integers(0, 1))
        return ([f"v = bz.vec2({k1}, {k2})", f"{target}[I] = v.{'xy'[c]} - v.norm(0.5)"],
                [f"v = vec2f({p1}, {p2})", f"{target}[T(I)] = v[{c}] - norm_eps(v[0], v[1], 0.5)"])
    (kb, pb) = draw(bools(other))
    then_k, then_p = draw(statements(target, other, depth + 1))
    else_k, else_p = draw(statements(target, other, depth + 1))
    return ([f"if {kb}:", *("    " + s for s in then_k), "else:", *("    " + s for s in else_k)],
            [f"if {pb}:", *("    " + s for s in then_p), "else:", *("    " + s for s in else_p)])


@st.composite
def programs(draw):
    """Tasks, each (its ndrange's margins, kernel lines, Python lines), and the grid's shape."""
    shape = (draw(st.integers(1, 5)), draw(st.integers(1, 6)))
    tasks = []
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(["a", "b"]))
        other = "b" if target == "a" else "a"
        margins = draw(st.tuples(*(st.integers(0, 1) for _ in range(4))))
        body = [draw(statements(target, other)) for _ in range(draw(st.integers(1, 3)))]
        tasks.append((margins, [line for k, _ in body for line in k], [line for _, p in body for line in p]))
    return shape, tasks


def render(tasks, python: bool) -> str:
    lines = ["def program(g: F2, a: F2, b: F2, flags: I2, acc: F1):"]
    for (lo0, hi0, lo1, hi1), kernel_lines, python_lines in tasks:
        lines += [f"    for I in bz.grouped(bz.ndrange(({lo0}, g.shape[0] - {hi0}), ({lo1}, g.shape[1] - {hi1}))):",
                  "        top = np.array([g.shape[0] - 1, g.shape[1] - 1])" if python
                  else "        top = bz.vec2l(g.shape[0] - 1, g.shape[1] - 1)"]
        lines += [f"        {line}" for line in (python_lines if python else kernel_lines)]
    return "\n".join(lines) + "\n"


def _blend(x, y):
    return x * 0.5 - y


def _mix(v, w):
    if v[0] > w[0]:
        return v * 0.5 + w
    return v - w


def norm_eps(x, y, eps) -> np.float32:
    """Taichi's v.norm(eps) of a 2-vector in float32: sqrt(x * x + y * y + eps)."""
    x, y = np.float32(x), np.float32(y)
    return np.sqrt(x * x + y * y + np.float32(eps))


def normalized_eps(x, y, eps) -> np.ndarray:
    """Taichi's v.normalized(eps) in float32: v / (sqrt(x * x + y * y) + eps)."""
    x, y = np.float32(x), np.float32(y)
    return vec2f(x, y) / (np.sqrt(x * x + y * y) + np.float32(eps))


def vec2f(x, y) -> np.ndarray:
    return np.array([x, y], np.float32)


def load(source: str, python: bool):
    filename = f"<braze-grid-fuzz {next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"bz": bz, "np": np, "UPPER": UPPER, "T": tuple, "norm_eps": norm_eps, "vec2f": vec2f,
                 "normalized_eps": normalized_eps,
                 "blend": _blend if python else bz.func(_blend), "mix": _mix if python else bz.func(_mix),
                 "F2": bz.Array[bz.float32, 2],
                 "I2": bz.Array[bz.int32, 2], "F1": bz.Array[bz.float32, 1]}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["program"]


def inputs(shape: tuple[int, int], seed: int) -> list:
    rng = np.random.default_rng(seed)
    grid = rng.uniform(-2, 2, shape).astype(np.float32)
    return [grid, np.ones(shape, np.float32), np.zeros(shape, np.float32), np.zeros(shape, np.int32),
            np.zeros(8, np.float32)]


def _agree(got: list, want: list) -> None:
    for g, w in zip(got[1:], want[1:], strict=True):
        if g.dtype.kind == "i":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def _python(tasks, shape, seed) -> list:
    expected = inputs(shape, seed)
    with np.errstate(all="ignore"):
        load(render(tasks, python=True), python=True)(*expected)
    return expected


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31))
def test_fused_unfused_and_python_agree(program, seed):
    shape, tasks = program
    note(render(tasks, python=False))
    fused, unfused = inputs(shape, seed), inputs(shape, seed)
    kernel_fn = load(render(tasks, python=False), python=False)
    bz.kernel(kernel_fn)(*fused)
    with config.scope(fuse_tasks=False):
        bz.kernel(kernel_fn)(*unfused)
    expected = _python(tasks, shape, seed)
    _agree(unfused, expected)
    _agree(fused, unfused)


@settings(max_examples=examples(0.4), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31))
def test_the_cuda_code_on_the_cpu_agrees_with_python(program, seed):
    if SCALE < CUDA_ON_CPU_SCALE:
        pytest.skip(f"seconds a program: BRAZE_FUZZ_SCALE={CUDA_ON_CPU_SCALE} or more runs it")
    if not loop_cuda_on_cpu.available():
        pytest.skip("no C++ compiler")
    shape, tasks = program
    note(render(tasks, python=False))
    got = inputs(shape, seed)
    loop_cuda_on_cpu.run_on_cpu(bz.kernel(load(render(tasks, python=False), python=False)), *got)
    _agree(got, _python(tasks, shape, seed))
