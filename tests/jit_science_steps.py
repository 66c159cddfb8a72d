"""Steps of random NumPy `@bz.jit` programs (tests/jit_programs.py) that scientific code writes:
np.einsum's reductions (braze/ops/numpy_einsum.py), np.convolve and np.correlate with short kernels,
np.unwrap, np.searchsorted and np.interp over short tables (braze/ops/numpy_signal.py), np.allclose,
arithmetic with a traced extent, np.pad's modes other than "constant", np.roll and slice assignment
(braze/ops/numpy_api.py, braze/ops/view_composites.py).

Conditioning, as in tests/jit_programs.py: what compares values (np.unwrap's jumps, np.searchsorted,
np.interp's interval, np.allclose) reads inputs, exact in float32 and float64 alike; a table or a kernel
is a constant of the program.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st
from jit_programs import Value, _broadcast, _Draw

TABLES = ((0.0,), (-1.0, 0.5, 2.0), (-2.5, -1.0, -1.0, 0.0, 1.5))  # sorted, with a repeated entry
TABLE_VALUES = ((4.0,), (1.0, -3.0, 0.5), (0.5, 2.0, -1.0, 3.0, 0.0))
KERNELS = ((1.0,), (0.25, 0.5, 0.25), (1.0, -2.0), (1.0, -2.0, 0.5, 3.0))
PAD_MODES = ("edge", "wrap", "reflect", "symmetric")
SCIENCE_OPS = frozenset({"einsum", "einsum2", "convolve", "correlate", "unwrap", "searchsorted", "interp",
                         "allclose", "extent_arithmetic", "pad_mode", "roll", "assign"})


def _input(draw: _Draw, label: str) -> int:
    return draw(st.integers(0, len(draw.program.inputs) - 1), label)


def _einsum(draw: _Draw) -> None:
    """A reduction of one operand or a product of two of one shape: 'abc->ca', 'ab,ab->a', ..."""
    x = draw.pick("operand")
    v = draw.value(x)
    letters = "abc"[:len(v.shape)]
    kept = draw(st.permutations(letters), "kept order")[:draw(st.integers(0, len(letters)), "kept")]
    summed = [e for letter, e in zip(letters, v.shape, strict=True) if letter not in kept]
    count = max(math.prod(summed), 1)
    shape = tuple(v.shape[letters.index(letter)] for letter in kept)
    implicit = "".join(sorted(letters)) == "".join(kept) and draw(st.booleans(), "implicit")
    if draw(st.booleans(), "ellipsis"):  # '...a,...a->...': the leading axes broadcast, the last is summed
        y = draw.pick("second")
        w = draw.value(y)
        shape = _broadcast(v, w)
        if shape is None or not shape or (v.shape[-1:] != w.shape[-1:]):
            return
        draw.add("einsum2", (x, y), Value(shape[:-1], "float", v.bound * w.bound * max(shape[-1], 1),
                                          v.precise and w.precise), "...a,...a->...")
        return
    if draw(st.booleans(), "two operands"):
        same = [i for i, w in enumerate(draw.program.values) if w.kind == "float" and not w.holes
                and w.shape == v.shape]
        y = draw(st.sampled_from(same), "second")
        w = draw.value(y)
        spec = f"{letters},{letters}->{''.join(kept)}"
        draw.add("einsum2", (x, y), Value(shape, "float", v.bound * w.bound * count, v.precise and w.precise), spec)
        return
    spec = letters if implicit else f"{letters}->{''.join(kept)}"
    draw.add("einsum", (x,), Value(shape, "float", v.bound * count, v.precise), spec)


def _convolution(draw: _Draw) -> None:
    """A 1-D value with a constant kernel no longer than it (braze refuses a shorter signal: one trace
    serves every length, where NumPy swaps the two)."""
    x = draw.pick("signal")
    v = draw.value(x)
    inputs = [i for i, (shape, _) in enumerate(draw.program.inputs) if len(shape) == 1 and 1 <= shape[0] <= 7]
    traced = inputs and draw(st.booleans(), "traced kernel")  # an input's taps: their number is the trace's
    kernel = draw(st.sampled_from(inputs), "kernel input") if traced else draw(st.sampled_from(KERNELS), "kernel")
    k = draw.value(kernel).shape[0] if traced else len(kernel)
    if len(v.shape) != 1 or v.shape[0] < k:
        return
    op = draw(st.sampled_from(("convolve", "correlate")), "op")
    mode = draw(st.sampled_from(("full", "same", "valid")), "mode")
    n = v.shape[0]
    extent = {"full": n + k - 1, "same": n, "valid": n - k + 1}[mode]
    weight = draw.value(kernel).bound * k if traced else sum(abs(t) for t in kernel)
    value = Value((extent,), "float", v.bound * weight, v.precise, derived=True)
    if traced:
        draw.add(op, (x, kernel), value, None, mode)
    else:
        draw.add(op, (x,), value, kernel, mode)


def _unwrap(draw: _Draw) -> None:
    """np.unwrap of an input: its jumps compare differences of exact values with the discontinuity."""
    x = _input(draw, "input")
    v = draw.value(x)
    if not v.shape:
        return
    axis = draw(st.integers(-1, len(v.shape) - 1), "axis")
    period, discont = draw(st.sampled_from(((None, None), (4.0, None), (None, 4.0))), "period")
    turns = 2 * math.pi if period is None else period
    draw.add("unwrap", (x,), Value(v.shape, "float", 3.0 + turns * max(v.shape[axis], 1)), axis, period, discont)


def _lookup(draw: _Draw) -> None:
    """np.searchsorted or np.interp of an input over a constant table (float64 tables: interp is float64)."""
    x = _input(draw, "input")
    v = draw.value(x)
    table = draw(st.sampled_from(range(len(TABLES))), "table")
    if draw(st.booleans(), "interp"):
        left, right = draw(st.sampled_from(((None, None), (-1.0, 9.0))), "ends")
        bound = max(abs(f) for f in TABLE_VALUES[table] + tuple(e for e in (left, right) if e is not None))
        draw.add("interp", (x,), Value(v.shape, "float", bound, True), table, left, right)
        return
    side = draw(st.sampled_from(("left", "right")), "side")
    draw.add("searchsorted", (x,), Value(v.shape, "int", len(TABLES[table])), table, side)


def _allclose(draw: _Draw) -> None:
    """np.allclose of two inputs: one bool of the whole."""
    x, y = _input(draw, "input"), _input(draw, "second input")
    atol = draw(st.sampled_from((0.5, 6.0, 1e-8)), "atol")
    try:
        np.broadcast_shapes(draw.value(x).shape, draw.value(y).shape)
    except ValueError:
        return
    draw.add("allclose", (x, y), Value((), "bool", 1.0), atol)


def _extent_arithmetic(draw: _Draw) -> None:
    """A value times and plus numbers made of its own extents: `x * (x.shape[0] * 0.5) + x.size / 4`,
    `abs(n - 3)` and `divmod(n, 2)`, or a ramp `np.arange(n) / (n + 1)`."""
    x = draw.pick("operand")
    v = draw.value(x)
    if not v.shape:
        return
    axis = draw(st.integers(0, len(v.shape) - 1), "axis")
    form = draw(st.sampled_from(("scale", "abs_divmod", "ramp")), "form")
    bound = {"scale": v.bound * v.shape[axis] * 0.5 + math.prod(v.shape) / 4 + 1,
             "abs_divmod": v.bound * (v.shape[axis] + 3) + 1, "ramp": v.bound + 1}[form]
    draw.add("extent_arithmetic", (x,), Value(v.shape, "float", bound, v.precise), axis, form)


def _pad_mode(draw: _Draw) -> None:
    """np.pad by edge, wrap, reflect or symmetric, no wider than one reflection (braze refuses wider at
    run time, where NumPy reflects again); an empty axis padded is refused by both."""
    x = draw.pick("operand")
    v = draw.value(x)
    if not v.shape:
        return
    mode = draw(st.sampled_from(PAD_MODES), "mode")
    room = {"edge": 2, "wrap": None, "reflect": -1, "symmetric": None}[mode]
    widths = []
    for e in v.shape:
        most = 2 if room == 2 else min(2, max(e + (room or 0), 0))
        widths.append(tuple(draw(st.tuples(st.integers(0, most), st.integers(0, most)), "widths")))
    shape = tuple(e + a + b for e, (a, b) in zip(v.shape, widths, strict=True))
    draw.add("pad_mode", (x,), Value(shape, "float", v.bound, v.precise, derived=True), tuple(widths), mode)


def _roll(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    axis = draw(st.sampled_from([None, *range(len(v.shape))] + ([(0, -1)] if len(v.shape) >= 2 else [])), "axis")
    shift = draw(st.integers(-3, 3) if not isinstance(axis, tuple) else st.tuples(st.integers(-3, 3),
                                                                                   st.integers(-8, 8)), "shift")
    draw.add("roll", (x,), v, shift, axis)


def _assign(draw: _Draw) -> None:
    """A copy written in place: a slice of an axis set to a number or to twice what it held."""
    x = draw.pick("operand")
    v = draw.value(x)
    if not v.shape:
        return
    axis = draw(st.integers(0, len(v.shape) - 1), "axis")
    start, stop = draw(st.sampled_from(((0, 1), (1, None), (None, -1), (-2, None), (1, 3))), "bounds")
    value = draw(st.sampled_from((0.5, -2.0, "twice", "mask", "row")), "value")
    draw.add("assign", (x,), Value(v.shape, "float", 2 * v.bound + 2, v.precise), axis, start, stop, value)


SCIENCE_STEPS = (_einsum, _convolution, _unwrap, _lookup, _allclose, _extent_arithmetic, _pad_mode, _roll, _assign)


def science_spelling(op: str, xs: list, params: tuple):
    """The step in NumPy's functions."""
    x = xs[0]
    match op:
        case "einsum":
            return np.einsum(params[0], x)
        case "einsum2":
            return np.einsum(params[0], x, xs[1])
        case "convolve" | "correlate":
            return getattr(np, op)(x, xs[1] if params[0] is None else np.array(params[0]), params[1])
        case "unwrap":
            options = {k: v for k, v in zip(("period", "discont"), params[1:]) if v is not None}
            return np.unwrap(x, axis=params[0], **options)
        case "searchsorted":
            return np.searchsorted(np.array(TABLES[params[0]]), x, side=params[1])
        case "interp":
            return np.interp(x, np.array(TABLES[params[0]]), np.array(TABLE_VALUES[params[0]]), left=params[1],
                             right=params[2])
        case "allclose":
            return np.allclose(x, xs[1], atol=params[0])
        case "extent_arithmetic":
            n = x.shape[params[0]]
            if params[1] == "abs_divmod":
                return x * abs(n - 3) + divmod(n, 2)[1]
            if params[1] == "ramp":  # a NumPy array made of an extent, cast to the value's dtype
                return x + (np.arange(x.shape[-1]) / (x.shape[-1] + 1)).astype(x.dtype)
            return x * (n * 0.5) + x.size / 4 + 1 / (n + 1)
        case "pad_mode":
            return np.pad(x, params[0], mode=params[1])
        case "roll":
            return np.roll(x, params[0], axis=params[1])
        case "assign":
            axis, start, stop, value = params
            y = x.copy()
            key = (slice(None),) * axis + (slice(start, stop),)
            if value == "mask":  # a boolean mask of the value itself, as clamping code writes
                y[y > 0.5] = 0.5
            elif value == "row":  # the region's first slice along the axis, broadcast over it
                y[key] = y[key][(slice(None),) * axis + (slice(0, 1),)]
            else:
                y[key] = y[key] * 2 if value == "twice" else value
            return y
    raise AssertionError(op)
