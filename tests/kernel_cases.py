"""Loop kernels covering the `@bz.kernel` language, shared by the CUDA tests: every statement kind,
every atomic, every `bz.math` function, every dtype, C++ keywords as names, and the demo steps.

`tests/codegen/test_cuda_loops.py` compiles each one's CUDA with NVRTC (no GPU needed);
`tests/codegen/test_cuda_loops_on_cpu.py` runs a few of them as CUDA on the CPU (tests/loop_cuda_on_cpu.py);
`tests/cuda/test_loop_kernels.py` runs each one on a GPU against the CPU.
"""

from __future__ import annotations

import linecache
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import braze as bz
from braze.cli.particles import particle_step, particle_step_12, particles, particles_12
from braze.dtypes import as_dtype
from braze.ops.elementwise import BINARY, TERNARY, UNARY


@dataclass(frozen=True)
class Case:
    """A kernel and its arguments. `outputs`: arrays the kernel overwrites entirely (poisoned before a
    run, so an element no thread writes shows). `tolerance`: relative, 0 means bit for bit.
    `compare`: (GPU result, CPU result) -> None, for results that depend on the order of atomics."""

    name: str
    kernel: Callable
    args: Callable[[np.random.Generator], list]
    outputs: tuple[int, ...] = ()
    tolerance: float = 0.0
    compare: Callable | None = None


def floats(rng, *shape, dtype=np.float32, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape).astype(dtype)


# --- statements -----------------------------------------------------------------------------------
@bz.kernel
def collatz(n: bz.Array[bz.int64, 1], steps: bz.Array[bz.int64, 1], odd_sum: bz.Array[bz.int64, 1]):
    for i in range(n.shape[0]):
        x = n[i]
        count = 0
        while x != 1:
            if x % 2 == 0:
                x = x // 2
            elif x % 3 == 0:
                x = 3 * x + 1
            else:
                x = 3 * x + 1
            count += 1
            if count > 1000:
                break
        steps[i] = count
        total = 0
        for j in range(0, 20, 1):
            if j % 2 == 0:
                continue
            if j > 2 * n[i]:
                break
            total += j
        for j in range(10, 0, -3):
            total -= j
        odd_sum[i] = total


@bz.kernel
def locals_and_updates(a: bz.Array[bz.float64, 1], out: bz.Array[bz.int32, 1]):
    for i in range(a.shape[0]):
        acc = a[i]
        acc *= 2
        acc -= 0.5
        acc /= 3
        m = i
        m <<= 2
        m |= 1
        m ^= 6
        m >>= 1
        if a[i] > 0:
            late = acc * 2  # first assigned in a branch, read after it
        else:
            late = -acc
        a[i] = acc + late
        out[i] = m


@bz.kernel
def sums_3d(a: bz.Array[bz.float32, 3], out: bz.Array[bz.float32, 2]):
    for i, j in bz.ndrange(a.shape[0], a.shape[1]):
        s = 0.0
        for t in range(a.shape[2]):
            s += a[i, j, t]
        out[j, i] = s
    for i, j in bz.ndrange((1, a.shape[0] - 1), (1, a.shape[1])):
        out[j, i] *= a.shape[2]


@bz.kernel
def strided(a: bz.Array[bz.float64, 2], lo: int, hi: int):
    for i, j in bz.ndrange(a.shape[0], a.shape[1]):
        a[i, j] *= 2
    for i in range(lo, hi):
        a[0, i % a.shape[1]] += 1.0


@bz.kernel
def stepped_ranges(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 2], lo: int, step: int):
    for i in range(lo, a.shape[0], step):  # a scalar step: task t runs i = lo + t * step
        a[i] += 1.0
    for i in range(1, a.shape[0], 3):
        a[i] *= 3.0
    for i in range(a.shape[0] - 1, -1, -4):  # a negative step walks down, as Python's range does
        a[i] -= 0.5
    for i in range(a.shape[0] - 2, lo - 1, -step):  # a step negated at run time
        a[i] += 0.25
    for i in range(0, b.shape[0], 2):
        for j in range(b.shape[1]):
            b[i, j] = b[i + 1, j] * 2.0 if i + 1 < b.shape[0] else -b[i, j]


@bz.kernel
def casts_and_division(a: bz.Array[bz.int32, 1], f: bz.Array[bz.float32, 1], g: bz.Array[bz.int32, 1],
                       h: bz.Array[bz.int8, 1]):
    for i in range(a.shape[0]):
        f[i] = a[i] / 4
        g[i] = bz.int32(f[i] * 10.0) + a[i] // 3 + a[i] % 3 + bz.int32(-f[i] * 1e10)
        h[i] = bz.int8(a[i] * 37)


@bz.kernel
def halves(a: bz.Array[bz.float16, 1], b: bz.Array[bz.float16, 1], c: bz.Array[bz.bfloat16, 1],
           d: bz.Array[bz.bfloat16, 1]):
    for i in range(a.shape[0]):
        h = a[i] * 0.1 + 1.0
        b[i] = h * h
        d[i] = c[i] * 0.3 - c[i]


@bz.kernel
def atomics(values: bz.Array[bz.int64, 1], bins: bz.Array[bz.int32, 1], olds: bz.Array[bz.int32, 1],
            big: bz.Array[bz.int64, 1], extremes: bz.Array[bz.float64, 1], sums: bz.Array[bz.float32, 1]):
    for i in range(values.shape[0]):
        olds[i] = bz.atomic_add(bins[values[i] % bins.shape[0]], 1)
        bz.atomic_sub(bins[0], 0)
        bz.atomic_sub(big[0], values[i])
        bz.atomic_max(big[1], values[i])
        bz.atomic_min(big[2], values[i])
        bz.atomic_max(extremes[0], bz.float64(values[i]))
        bz.atomic_min(extremes[1], bz.float64(values[i]))
        bz.atomic_add(sums[0], 1.0)
        bz.atomic_sub(sums[1], 2.0)
        bz.atomic_max(sums[2], bz.float32(values[i]))
        bz.atomic_min(sums[3], -bz.float32(values[i]))


def atomics_args(rng):
    values = rng.integers(0, 1000, 5000).astype(np.int64)
    return [values, np.zeros(7, np.int32), np.zeros(5000, np.int32), np.array([0, -10**12, 10**12], np.int64),
            np.array([-1e9, 1e9]), np.array([0, 0, -1e9, 1e9], np.float32)]


def compare_atomics(gpu: list, cpu: list) -> None:
    """Everything but the old values is order-free; each bin's old values are 0, 1, 2, ... in some order."""
    for position in (1, 3, 4, 5):
        np.testing.assert_array_equal(gpu[position], cpu[position])
    values, bins, olds = cpu[0], gpu[1], gpu[2]
    for b in range(len(bins)):
        assert sorted(olds[values % len(bins) == b].tolist()) == list(range(int(bins[b])))


@bz.kernel
def random_draws(counters: bz.Array[bz.int64, 1], bits: bz.Array[bz.int64, 1], uniform: bz.Array[bz.float32, 1],
                 normal: bz.Array[bz.float32, 1], wide: bz.Array[bz.float64, 1], seed: int, offset: int):
    for i in range(counters.shape[0]):
        bits[i] = bz.random.bits(seed, counters[i], offset)
        uniform[i] = bz.random.uniform(seed, counters[i], offset)
        normal[i] = bz.random.normal(seed, counters[i], offset=offset)
        wide[i] = bz.random.normal(seed, counters[i], offset, dtype=bz.float64)


def random_args(rng):
    counters = np.concatenate([np.arange(-8, 3000), rng.integers(-2**62, 2**62, 1000)]).astype(np.int64)
    n = counters.size
    return [counters, np.zeros(n, np.int64), np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n),
            int(rng.integers(-2**63, 2**63)), int(rng.integers(0, 2**40))]


def compare_random(gpu: list, cpu: list) -> None:
    """Philox words and uniforms bit for bit; normals through float64 log and cos (CUDA's libm may
    differ from the CPU's in the last bit of a float64)."""
    for position in (1, 2):
        np.testing.assert_array_equal(gpu[position], cpu[position])
    np.testing.assert_allclose(gpu[3], cpu[3], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gpu[4], cpu[4], rtol=1e-13, atol=1e-13)


@bz.kernel
def vectors(x: bz.Array[bz.vec3, 1], v: bz.Array[bz.vec3, 1], m: bz.Array[bz.mat33, 1], q: bz.Array[bz.mat44d, 1],
            out: bz.Array[bz.float32, 2], inv: bz.Array[bz.mat44d, 1], bins: bz.Array[bz.vec3, 1], dt: bz.float32):
    for i in range(x.shape[0]):
        v[i] += (m[i] @ x[i] - bz.vec3(0.0, 9.81, 0.0)) * dt
        x[i] += v[i] * dt
        p = x[i]
        p.y = max(p.y, 0.0)
        out[i, 0] = bz.dot(p, v[i]) + bz.length(bz.cross(p, v[i]))
        out[i, 1] = bz.normalize(p)[i % 3] + bz.determinant(m[i])
        out[i, 2] = (bz.inverse(m[i]) @ bz.transpose(m[i]))[1, 2]
        inv[i] = bz.inverse(q[i])
        bins[i % 5] += bz.vec3(1.0, 2.0, 3.0)


def vectors_args(rng):
    n = 777
    return [floats(rng, n, 3), floats(rng, n, 3), floats(rng, n, 3, 3), floats(rng, n, 4, 4, dtype=np.float64),
            np.zeros((n, 3), np.float32), np.zeros((n, 4, 4)), np.zeros((5, 3), np.float32), np.float32(0.01)]


@bz.kernel
def vector_parameters(x: bz.Array[bz.vec3, 1], out: bz.Array[bz.vec3, 1], trail: bz.Array[bz.float64, 1],
                      gravity: bz.vec3, frame: bz.mat22d, k: bz.int32):
    for i in range(x.shape[0]):
        history = bz.local(bz.vec3, 4)
        turns = bz.local(bz.mat22d, 2)
        for j in range(4):
            history[j] = x[i] + gravity * float(j)
        history[k % 4].y = 0.5
        history[(i + 1) % 4] += gravity
        turns[1] = frame
        turns[0] = bz.transpose(frame)
        total = bz.vec3()
        for j in range(4):
            total += history[j]
        out[i] = total
        trail[i] = (turns[i % 2] @ bz.vec2d(bz.float64(x[i].x), 1.0))[0] + turns[1][1, 0]


def vector_parameters_args(rng):
    return [floats(rng, 300, 3), np.zeros((300, 3), np.float32), np.zeros(300), (0.0, -9.81, 0.5),
            ((1.0, 2.0), (3.0, 4.0)), 3]


@bz.kernel
def local_arrays(a: bz.Array[bz.float32, 2], out: bz.Array[bz.float32, 2]):
    for i in range(a.shape[0]):
        buf = bz.local(bz.float32, 8)
        for j in range(8):
            buf[j] = a[i, j]
        for j in range(1, 8):
            key = buf[j]
            t = j - 1
            while t >= 0 and buf[t] > key:
                buf[t + 1] = buf[t]
                t -= 1
            buf[t + 1] = key
        buf[-1] += buf[0]
        for j in range(8):
            out[i, j] = buf[j]


SCALE = 3


@bz.func
def clamp01(x):
    if x < 0.0:
        return 0.0
    elif x > 1.0:
        return 1.0
    else:
        return x


@bz.kernel
def static_and_helpers(a: bz.Array[bz.float32, 2], t: bz.Array[bz.float64, 1], out: bz.Array[bz.float64, 1]):
    for i in range(a.shape[0]):
        for d in bz.static(range(SCALE)):
            if bz.static(d == 1):
                a[i, d] = 100.0
            else:
                a[i, d] = d * 1.0 + SCALE
    for i in range(t.shape[0]):
        out[i] = 10.0 + 10.0 * clamp01(t[i])


@bz.kernel(debug=True)
def short_circuits(a: bz.Array[bz.float32, 1], out: bz.Array[bz.float32, 1]):
    for i in range(a.shape[0]):
        left = a[i - 1] if i > 0 else 0.0
        both = i > 0 and a[i - 1] > 0.0
        out[i] = left + (1.0 if both else 0.0)


@bz.kernel
def serial_tasks(a: bz.Array[bz.int64, 1], total: bz.Array[bz.int64, 1]):
    n = a.shape[0] - 1
    total[0] = 0
    for i in range(n):
        a[i] = i * i
    if n > 0:
        s = 0
        for j in range(n):
            s += a[j]
        total[0] = s
    for i in range(a.shape[0]):
        x, y = a[i], total[0]
        x, y = y, x
        a[i] = x - y


@bz.func
def sorted_pair(a, b):
    if a > b:  # an early return, and a tuple
        return b, a
    return a, b


@bz.kernel
def composed_math(x: bz.Array[bz.float64, 1], f: bz.Array[bz.float32, 1], out: bz.Array[bz.float64, 2],
                  out32: bz.Array[bz.float32, 2]):
    for i in range(x.shape[0]):
        v, w = x[i], f[i]
        out[i, 0], out32[i, 0] = math.hypot(v, 2.0), math.hypot(w, 2.0)
        out[i, 1], out32[i, 1] = math.atan(v), math.atan(w)
        out[i, 2], out32[i, 2] = math.asin(v / 3.0), math.asin(w / 3.0)
        out[i, 3], out32[i, 3] = math.acos(v / 3.0), math.acos(w / 3.0)
        out[i, 4], out32[i, 4] = math.sinh(v), math.sinh(w)
        out[i, 5], out32[i, 5] = math.cosh(v), math.cosh(w)
        out[i, 6], out32[i, 6] = math.log10(abs(v) + 1e-3), math.log10(abs(w) + 1e-3)
        out[i, 7], out32[i, 7] = sorted_pair(v, w)
        out[i, 8], out32[i, 8] = math.fmod(v, -0.7), math.fmod(w, 0.7)


def composed_math_args(rng):
    x = np.concatenate([rng.uniform(-3, 3, 200), [0.0, 1e-9, -1e-9, 3.0, -3.0]])
    return [x, x.astype(np.float32), np.zeros((205, 9)), np.zeros((205, 9), np.float32)]


@bz.kernel
def keyword_names(new: bz.Array[bz.float32, 1], threadIdx: bz.Array[bz.float32, 1], int: bz.int32):  # noqa: A002
    for i in range(new.shape[0]):
        float = new[i] * 2.0  # noqa: A001
        this = float + 1.0
        delete, template, blockIdx = this, 2.0, 3.0
        bz_args = delete + template * blockIdx
        exp = bz.math.exp(bz_args * 0.01)
        new_shape0 = new.shape[0]
        a = exp + new_shape0 + int
        threadIdx[i] = a


# --- every dtype, every bz.math function ---------------------------------------------------------
def _load(source: str, name: str) -> Callable:
    filename = f"<braze kernel case {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"bz": bz}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


DTYPES = ["bool", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def dtype_kernel(dtype: str) -> Callable:
    """Loads, arithmetic that rounds the same everywhere, and stores of one dtype."""
    body = ("out[i] = a[i] != (i % 2 == 0)" if dtype == "bool" else
            "out[i] = a[i] * a[i] - a[i] + b" if dtype not in ("float16", "bfloat16") else
            "out[i] = a[i] * a[i] - a[i] + bz.float32(b)")
    scalar = "bz.bool_" if dtype == "bool" else f"bz.{dtype}" if dtype not in ("float16", "bfloat16") else "float"
    source = f"""
def copy_{dtype}(a: bz.Array[bz.{dtype if dtype != 'bool' else 'bool_'}, 1], out: bz.Array, b: {scalar}):
    for i in range(a.shape[0]):
        {body}
"""
    return bz.kernel(_load(source, f"copy_{dtype}"))


def dtype_args(dtype: str):
    numpy_dtype = as_dtype(dtype).numpy

    def args(rng):
        a = (rng.uniform(-50, 50, 300) if dtype != "bool" else rng.integers(0, 2, 300)).astype(numpy_dtype)
        scalar = True if dtype == "bool" else 3 if dtype.startswith("int") else 0.75
        return [a, np.zeros(300, numpy_dtype), scalar]
    return args


def _math_ops(kind: str) -> list[tuple[str, int]]:
    return [(name, arity) for arity, table in ((1, UNARY), (2, BINARY), (3, TERNARY))
            for name, (kinds, _, _) in table.items() if kind in kinds]


def math_kernel(dtype: str) -> Callable:
    """Every bz.math function that takes `dtype`, one output row each (as float64)."""
    kind = as_dtype(dtype).kind
    lines = []
    for row, (op, arity) in enumerate(_math_ops(kind)):
        operands = ", ".join(["x[i]", "y[i]", "z[i]"][:arity])
        lines.append(f"        out[{row}, i] = bz.float64(bz.math.{op}({operands}))")
    name = f"math_{dtype}"
    array = f"bz.Array[bz.{dtype if dtype != 'bool' else 'bool_'}, 1]"
    source = (f"def {name}(x: {array}, y: {array}, z: {array}, out: bz.Array[bz.float64, 2]):\n"
              f"    for i in range(x.shape[0]):\n" + "\n".join(lines) + "\n")
    return bz.kernel(_load(source, name))


def math_args(dtype: str):
    numpy_dtype = as_dtype(dtype).numpy
    rows = len(_math_ops(as_dtype(dtype).kind))

    def args(rng):
        if dtype == "bool":
            x, y, z = (rng.integers(0, 2, 200).astype(bool) for _ in range(3))
        elif dtype.startswith("int"):
            x, y, z = (rng.integers(-20, 20, 200).astype(numpy_dtype) for _ in range(3))
        else:
            x, y, z = (rng.uniform(low, 3, 200).astype(numpy_dtype) for low in (-3, 0.25, -1))
        return [x, y, z, np.zeros((rows, 200))]
    return args


def _particles(make):
    return lambda rng: make(8192, int(rng.integers(0, 1000))) + [np.float32(1e-3)]


def all_cases() -> list[Case]:
    """Every case, by name."""
    cases = [
        Case("particle_step", particle_step, _particles(particles)),
        Case("particle_step_12", particle_step_12, _particles(particles_12)),
        Case("collatz", collatz, lambda r: [np.arange(1, 300, dtype=np.int64), np.zeros(299, np.int64),
                                            np.zeros(299, np.int64)], outputs=(1, 2)),
        Case("locals_and_updates", locals_and_updates, lambda r: [floats(r, 500, dtype=np.float64),
                                                                  np.zeros(500, np.int32)], outputs=(1,)),
        Case("sums_3d", sums_3d, lambda r: [floats(r, 13, 17, 9), np.zeros((17, 13), np.float32)], outputs=(1,)),
        Case("strided", strided, lambda r: [floats(r, 40, 30, dtype=np.float64)[::2, 1::3], 3, 9]),
        Case("stepped_ranges", stepped_ranges, lambda r: [floats(r, 1001), floats(r, 37, 5), 2, 7]),
        Case("casts_and_division", casts_and_division,
             lambda r: [r.integers(-10**6, 10**6, 777).astype(np.int32), np.zeros(777, np.float32),
                        np.zeros(777, np.int32), np.zeros(777, np.int8)], outputs=(1, 2, 3)),
        Case("halves", halves, lambda r: [floats(r, 333, dtype=np.float16), np.zeros(333, np.float16),
                                          floats(r, 333, dtype=bz.bfloat16.numpy), np.zeros(333, bz.bfloat16.numpy)],
             outputs=(1, 3)),
        Case("atomics", atomics, atomics_args, compare=compare_atomics),
        Case("local_arrays", local_arrays, lambda r: [floats(r, 300, 8), np.zeros((300, 8), np.float32)], outputs=(1,)),
        Case("vectors", vectors, vectors_args, outputs=(4, 5)),
        Case("vector_parameters", vector_parameters, vector_parameters_args, outputs=(1, 2)),
        Case("random", random_draws, random_args, outputs=(1, 2, 3, 4), compare=compare_random),
        Case("static_and_helpers", static_and_helpers,
             lambda r: [np.zeros((50, 3), np.float32), np.linspace(-1, 2, 99), np.zeros(99)], outputs=(0, 2)),
        Case("short_circuits", short_circuits, lambda r: [floats(r, 1000), np.zeros(1000, np.float32)],
             outputs=(1,)),
        Case("serial_tasks", serial_tasks, lambda r: [np.zeros(600, np.int64), np.zeros(1, np.int64)]),
        Case("composed_math", composed_math, composed_math_args, outputs=(2, 3), tolerance=2e-6),
        Case("keyword_names", keyword_names, lambda r: [floats(r, 100), np.zeros(100, np.float32), 7],
             outputs=(1,), tolerance=1e-6),
    ]
    cases += [Case(f"dtype_{d}", dtype_kernel(d), dtype_args(d), outputs=(1,)) for d in DTYPES]
    # Integer and bool operands of exp, sin, ... compute in float32 (as the op table promotes
    # them), where CUDA's libm and braze's CPU math may differ in the last bit.
    tolerances = {"float16": 1e-2, "bfloat16": 1e-2, "float32": 2e-6, "float64": 1e-13}
    cases += [Case(f"math_{d}", math_kernel(d), math_args(d), outputs=(3,), tolerance=tolerances.get(d, 2e-6))
              for d in ("bool", "int8", "int32", "int64", "float32", "float64")]
    return cases


def poison(array: np.ndarray) -> None:
    """Fills an output with NaN (floats) or all-ones bytes (integers, bools), as no kernel writes."""
    if array.dtype.kind == "f" or array.dtype == bz.bfloat16.numpy:
        array[...] = math.nan
    else:
        array.view(np.uint8)[...] = 0xFF
