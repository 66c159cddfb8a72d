"""Generated loop kernels over the Python that users write, against Python itself: expressions mixing
bools, ints and floats (`(x > 0) + k[i]`, `a[i] or 7`, `x if c else y`, `%` and `//` of negative
values, `n ** -1`, `math` functions of literals and of values, `round`, `int`), locals started from a
literal and updated in serial loops and under `if`s, `@bz.func` helpers returning early from nested
`if`s, `@bz.func` helpers that update the array they are given and return early, `while` loops that may
`break`, a per-thread local array (`bz.local`) written and read at constant and run-time indices,
`continue` under a condition, and several parallel loops per kernel over forward, reversed and stepped
ranges.

A kernel body and a `@bz.func` are Python, so the reference is the same function run by Python over
lists of Python floats and ints: float64 arithmetic with Python's rules for bools, `and`/`or`, `%`
and `//`. The kernel runs on float64 and int64 arrays, fused and with `fuse_tasks=False`; all three
must leave the same values. The inputs are multiples of 0.25, so divisions come out exact, halves
meet `round` and zeros meet signs.

The generator keeps to what braze promises: divisors are never zero (braze gives 0 or inf where
Python raises), `**` and `math.exp` take only leaves (int64 does not overflow and floats stay finite),
a local started from an int literal takes only ints and bools (a float into it is a KernelTypeError),
and a task reads the array it writes only at its own index (other indices would race).
"""

from __future__ import annotations

import itertools
import linecache
import math
import os

import loop_cuda_on_cpu
import numpy as np
import pytest
from fuzz_scale import examples
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import braze as bz
from braze import config

# BRAZE_FUZZ_LOOP_EXAMPLES=n runs n programs instead of 15 (a longer hunt).
EXAMPLES = int(os.environ.get("BRAZE_FUZZ_LOOP_EXAMPLES") or examples(15))
N = 9  # loop bound and array length: odd, so stepped and reversed ranges end on different parities
OUTS = 2  # o0, o1: the arrays the tasks write
READS = ["i", "n - 1 - i", "i // 2", "0", "(i + 3) % n"]
RANGES = ["range(n)", "range(n - 1, -1, -1)", "range(0, n, 2)", "range(1, n)", "range(n - 1, 0, -2)",
          "range(n // 2)"]
LITERALS = {"f": ["0.5", "-1.25", "3.0", "-2.0", "0.0"], "i": ["0", "1", "-3", "2", "7"], "b": ["True", "False"]}
DIVISORS = ["3", "-2", "0.75", "-1.5", "1.0", "-1"]
MATH_OF_VALUES = ["math.sqrt(abs({}))", "math.sin({})", "math.cos({})", "math.log(abs({}) + 1)", "math.floor({})",
                  "math.ceil({})", "math.trunc({})", "int({})", "round({})", "abs({})", "math.fabs({})"]
MATH_OF_LITERALS = ["math.sqrt(2)", "math.exp(1)", "math.sin(3)", "math.log(10)", "math.cos(0)", "math.floor(7)",
                    "math.atan(1)"]
_counter = itertools.count()


INTEGRAL = ("b", "i")


def mix(x: str, kx: str, y: str, ky: str) -> tuple[str, str, str]:
    """Two operands and the kind of their arithmetic: "b" bool, "i" int, "w" a float of literals alone (weak),
    "f" a float64 value. An int meeting a weak float is float32 in braze (Python scalars are weak and the
    default float is float32, as an int8 tensor times 0.5 is float32); the generator writes `f64(...)`
    around the int there, as a user who wants float64 does: `bz.float64` in the kernel, `float` in Python
    (a kernel's `float(0)` is the literal 0.0, weak again)."""
    if kx in INTEGRAL and ky == "w":
        x, kx = f"f64({x})", "f"
    if ky in INTEGRAL and kx == "w":
        y, ky = f"f64({y})", "f"
    if kx in INTEGRAL and ky in INTEGRAL:
        return x, y, "i"
    return x, y, "f" if "f" in (kx, ky) else "w"


def as_float(x: str, kx: str) -> tuple[str, str]:
    """An operand of a float function: an int's `math.sqrt(n)` or `n ** -1` is float32 in braze (the
    default float), so ints go through `f64(...)` first."""
    return (f"f64({x})", "f") if kx in INTEGRAL else (x, kx)


class Scope:
    """What an expression may read: the loop's locals (name -> kind) and the arrays a task may read."""

    def __init__(self, written: str | None, locals_: dict[str, str], helper: bool = False):
        self.written, self.locals, self.helper = written, locals_, helper


@st.composite
def leaves(draw, scope: Scope):
    kinds = ["literal", "literal", "local", "local"] + (["param"] * 2 if scope.helper else ["array"] * 3 + ["index"])
    kind = draw(st.sampled_from(kinds))
    if kind == "param":
        return draw(st.sampled_from(["x", "y"])), "w"  # floats, weak where a caller passes literals
    if kind == "local" and scope.locals:
        name = draw(st.sampled_from(sorted(scope.locals)))
        return name, scope.locals[name]
    if kind == "index":
        return draw(st.sampled_from(["i", "n"])), "i"
    if kind == "array":
        name = draw(st.sampled_from(["a", "b", "k"] + [f"o{j}" for j in range(OUTS)]))
        index = "i" if name == scope.written else draw(st.sampled_from(READS))
        return f"{name}[{index}]", "i" if name == "k" else "f"
    literal_kind = draw(st.sampled_from("ffiib"))
    return draw(st.sampled_from(LITERALS[literal_kind])), "w" if literal_kind == "f" else literal_kind


@st.composite
def expressions(draw, scope: Scope, depth: int = 0):
    """A Python expression and its kind (see `mix`)."""
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return draw(leaves(scope))
    op = draw(st.sampled_from(["+", "-", "*", "+", "*", "/", "//", "%", "and", "or", "if", "neg", "not", "<", "==",
                               ">=", "math", "literal_math", "min", "max", "pow", "pow", "call"]))
    sub = expressions(scope, depth + 1)
    if op == "literal_math":  # computed in float64, weak as the literal is
        form = draw(st.sampled_from(MATH_OF_LITERALS))
        return form, "i" if form.startswith("math.floor") else "w"
    if op == "pow":  # of leaves only: no int64 overflow
        x, kx = draw(leaves(scope))
        if draw(st.booleans()):
            return f"({x}) ** 2", "i" if kx in INTEGRAL else kx
        x, kx = as_float(f"abs({x}) + 1", kx)
        return f"({x}) ** -1", kx
    if op == "call":
        if scope.helper or not draw(st.booleans()):
            return draw(leaves(scope))
        args = [as_float(*draw(sub))[0] for _ in range(2)]
        return f"h{draw(st.integers(0, 1))}({', '.join(args)})", "w"  # weak where it returns literals alone
    x, kx = draw(sub)
    if op == "neg":
        return f"-({x})", "i" if kx in INTEGRAL else kx
    if op == "not":
        return f"(not {x})", "b"
    if op == "math":
        form = draw(st.sampled_from(MATH_OF_VALUES))
        if form.startswith(("math.floor", "math.ceil", "math.trunc", "int", "round")):
            return form.format(x), "i"
        if form == "abs({})":
            return form.format(x), "i" if kx in INTEGRAL else kx
        x, kx = as_float(x, kx)
        return form.format(x), kx
    if op in ("//", "%") and draw(st.booleans()):
        divisor = draw(st.sampled_from(DIVISORS))
        x, divisor, kind = mix(x, kx, divisor, "w" if "." in divisor else "i")
        return f"({x} {op} {divisor})", kind
    y, ky = draw(sub)
    if op == "/":
        x, kx = as_float(x, kx)
        x, y, kind = mix(x, kx, f"(abs({y}) + 1)", "i" if ky in INTEGRAL else ky)
        return f"({x} / {y})", kind
    if op in ("//", "%"):
        x, y, kind = mix(x, kx, f"(abs({y}) + 1)", "i" if ky in INTEGRAL else ky)
        return f"({x} {op} {y})", kind
    both_bools = kx == ky == "b"
    x, y, kind = mix(x, kx, y, ky)
    if op in ("+", "-", "*"):
        return f"({x} {op} {y})", kind
    if op in ("and", "or"):  # the value of one operand, as in Python
        return f"({x} {op} {y})", "b" if both_bools else kind
    if op == "if":
        c, _ = draw(sub)
        return f"({x} if {c} else {y})", "b" if both_bools else kind
    if op in ("min", "max"):
        return f"{op}({x}, {y})", "b" if both_bools else kind
    return f"({x} {op} {y})", "b"


@st.composite
def statements(draw, scope: Scope, depth: int = 0):
    """Lines of one statement in a task's body."""
    kinds = ["store", "store", "update", "local", "if", "buffer", "updater"] + (
        ["serial", "continue", "while"] if depth == 0 else [])
    kind = draw(st.sampled_from(kinds))
    value, value_kind = draw(expressions(scope))
    target = f"{scope.written}[i]"
    if kind == "store":
        return [f"{target} = {value}"]
    if kind == "updater":  # a helper updating the task's own element
        return [f"u{draw(st.integers(0, 1))}({scope.written}, i, {value})"]
    if kind == "buffer":  # into the local array, then out of it into t (f64: a Python float in Python)
        slot, other = (draw(st.sampled_from(["0", "1", "2", "c % 3", "(n - i) % 3"])) for _ in range(2))
        return [f"buf[{slot}] {draw(st.sampled_from(['=', '+=']))} {value}", f"t += f64(buf[{other}])"]
    if kind == "while":
        return draw(while_loops(scope))
    if kind == "update":
        return [f"{target} {draw(st.sampled_from(['+=', '-=', '*=']))} {value}"]
    if kind == "local":
        name = draw(st.sampled_from(sorted(scope.locals)))
        if scope.locals[name] == "i" and value_kind not in INTEGRAL:
            value = f"math.floor({value})"
        return [f"{name} {draw(st.sampled_from(['=', '+=', '-=']))} {value}"]
    if kind == "continue":
        return [f"if {value}:", "    continue"]
    if kind == "serial":  # a local carried through a nested loop, read by j
        name = draw(st.sampled_from(sorted(scope.locals)))
        inner = Scope(scope.written, {**scope.locals, "j": "i"})
        step, step_kind = draw(expressions(inner))
        if scope.locals[name] == "i" and step_kind not in INTEGRAL:
            step = f"math.floor({step})"
        lines = [f"for j in range({draw(st.integers(1, 3))}):", f"    {name} += {step}"]
        if draw(st.booleans()):
            lines.insert(1, f"    if {draw(expressions(inner))[0]}:")
            lines.insert(2, "        continue")
        return lines
    then = draw(statements(scope, depth + 1))
    orelse = draw(statements(scope, depth + 1))
    return [f"if {value}:", *("    " + s for s in then), "else:", *("    " + s for s in orelse)]


@st.composite
def while_loops(draw, scope: Scope):
    """A local updated in a `while` over a counter of its own, which a condition may `break` early."""
    name = draw(st.sampled_from(sorted(scope.locals)))
    inner = Scope(scope.written, {**scope.locals, "w": "i"})
    step, step_kind = draw(expressions(inner))
    if scope.locals[name] == "i" and step_kind not in INTEGRAL:
        step = f"math.floor({step})"
    lines = ["w = 0", f"while w < {draw(st.integers(0, 3))}:", f"    {name} += {step}", "    w += 1"]
    if draw(st.booleans()):
        lines += [f"    if {draw(expressions(inner))[0]}:", "        break"]
    return lines


@st.composite
def updaters(draw, name: str):
    """A `@bz.func` that updates element j of the array it is given, returning early under a condition."""
    ops = st.sampled_from(["+=", "-=", "*=", "="])
    value = draw(st.sampled_from(["v", "v * 0.5", "-v", "abs(v) + 1"]))
    return ["@bz.func", f"def {name}(o, j, v):", f"    if v > {draw(st.sampled_from(LITERALS['f']))}:",
            f"        o[j] {draw(ops)} {value}", "        return",
            f"    o[j] {draw(ops)} {draw(st.sampled_from(LITERALS['f']))}"]


@st.composite
def helpers(draw, name: str):
    """A `@bz.func` of two values returning from `if`s nested two deep, or falling through. Its returns
    are floats: a bool or an int returned beside a float literal is float32, as they meet in arithmetic."""
    scope = Scope(None, {}, helper=True)

    def returned() -> str:
        return as_float(*draw(expressions(scope)))[0]

    lines = ["@bz.func", f"def {name}(x, y):", f"    if {draw(expressions(scope))[0]}:"]
    lines += [f"        if {draw(expressions(scope))[0]}:", f"            return {returned()}"]
    if draw(st.booleans()):
        lines += [f"        return {returned()}"]
    if draw(st.booleans()):
        lines += [f"    elif {draw(expressions(scope))[0]}:", f"        return {returned()}"]
    return lines + [f"    return {returned()}"]


@st.composite
def programs(draw, max_tasks: int = 4) -> str:
    lines = [line for h in range(2) for line in draw(helpers(f"h{h}"))]
    lines += [line for h in range(2) for line in draw(updaters(f"u{h}"))]
    lines.append("def program(a: F64, b: F64, k: I64, o0: F64, o1: F64, n: int):")
    for _ in range(draw(st.integers(1, max_tasks))):
        written = f"o{draw(st.integers(0, OUTS - 1))}"
        scope = Scope(written, {"t": "f", "c": "i"})
        lines.append(f"    for i in {draw(st.sampled_from(RANGES))}:")
        lines.append(f"        t = {draw(st.sampled_from(LITERALS['f']))}")
        lines.append(f"        c = {draw(st.sampled_from(LITERALS['i']))}")
        lines.append("        buf = bz.local(bz.float64, 3)")
        for _ in range(draw(st.integers(1, 4))):
            lines += [f"        {line}" for line in draw(statements(scope))]
        lines.append(f"        {written}[i] += {draw(st.sampled_from(['t', 'c', 't * c', 't - c']))}")
    return "\n".join(lines) + "\n"


def load(source: str, python: bool):
    filename = f"<braze-python-fuzz {next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"bz": bz, "math": math, "F64": bz.Array[bz.float64, 1], "I64": bz.Array[bz.int64, 1],
                 "f64": float if python else bz.float64}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["program"]


def inputs(seed: int) -> list:
    rng = np.random.default_rng(seed)
    quarters = [rng.integers(-12, 13, N) / 4 for _ in range(2)]
    return [*quarters, rng.integers(-5, 6, N).astype(np.int64), np.zeros(N), np.zeros(N), N]


def python_run(source: str, seed: int) -> list:
    """The arrays the program leaves, run by Python over lists of Python numbers."""
    expected = [x.tolist() if isinstance(x, np.ndarray) else x for x in inputs(seed)]
    load(source, python=True)(*expected)
    return expected


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31))
def test_kernels_compute_what_python_computes(source, seed):
    note(source)
    program = load(source, python=False)
    fused, unfused = inputs(seed), inputs(seed)
    expected = python_run(source, seed)
    bz.kernel(program)(*fused)
    with config.scope(fuse_tasks=False):
        bz.kernel(program)(*unfused)
    for out in (3, 4):
        np.testing.assert_array_equal(unfused[out], np.array(expected[out]), err_msg=f"o{out - 3}, unfused")
        np.testing.assert_array_equal(fused[out], unfused[out], err_msg=f"o{out - 3}, fused")


@pytest.mark.skipif(not loop_cuda_on_cpu.available(), reason="needs g++")
@settings(max_examples=examples(1), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_tasks=2), st.integers(0, 2**31))
def test_the_kernels_cuda_computes_what_python_computes(source, seed):
    """Such programs' generated CUDA, run on the CPU with a thread per CUDA thread (tests/loop_cuda_on_cpu.py):
    g++ builds each, so CI runs one, of at most two loops."""
    note(source)
    host = inputs(seed)
    loop_cuda_on_cpu.run_on_cpu(bz.kernel(load(source, python=False)), *host, sm_count=2, resident=2)
    expected = python_run(source, seed)
    for out in (3, 4):
        np.testing.assert_array_equal(host[out], np.array(expected[out]), err_msg=f"o{out - 3}")
