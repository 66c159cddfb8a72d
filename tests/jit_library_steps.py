"""Steps of random `@bz.jit` programs (tests/jit_programs.py) that braze traces as compositions of its
ops: torch's functions and losses (braze/ops/torch_math.py, braze/ops/losses.py), NumPy's (braze/ops/
numpy_compositions.py), erfc and the exact GELU, argmax, cummax, var_mean, and NaN-ignoring reductions of
values with holes.

Some exist in both vocabularies (`SHARED_STEPS`), some in one library alone (`TORCH_STEPS`,
`NUMPY_STEPS`): a program drawn for torch may hold torch's, one for NumPy NumPy's. The NumPy spelling of
a torch-only op calls torch eagerly, so that `numpy_program` still gives every output's dtype as the
array API standard promotes (tests/frontend/test_fuzz_jit_programs.py compares dtypes with it).

Conditioning, as in tests/jit_programs.py: an op that jumps (argmax, frac, heaviside's step, round,
signbit) reads an input, exact in float32 and float64 alike; `logit` takes a sigmoid of an input, and
`xlogy` a logarithm of `abs(input) + 0.5`. A value with holes (NaN where an input is below a threshold)
is read only by the NaN-aware ops (`nansum`, `fmax`, `nan_to_num`, ...), never by the other steps.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st
from jit_programs import Value, _broadcast, _Draw, _reduced_shape
from jit_science_steps import SCIENCE_OPS, SCIENCE_STEPS, science_spelling

TORCH_ONLY = frozenset({
    "erfc", "gelu", "gelu_tanh", "softshrink", "tanhshrink", "hardtanh", "logit", "xlogy", "frac", "rsub",
    "glu", "softmin", "var_mean", "std_mean", "aminmax", "cummax_indices", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "bce_with_logits", "kl_div", "cosine_similarity", "pairwise_distance",
    "float_power", "hardshrink", "threshold"})
LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "bce_with_logits", "kl_div")


def _input(draw: _Draw, label: str) -> int:
    return draw(st.integers(0, len(draw.program.inputs) - 1), label)


def _axes(draw: _Draw, rank: int) -> int | None:
    """One axis or None (every axis): what every library's argmax, ptp and count_nonzero take."""
    return draw(st.sampled_from([None, *range(rank)]), "axis")


def _count(shape: tuple[int, ...], axis: int | None) -> int:
    return math.prod(shape) if axis is None else shape[axis]


def _reduced(shape: tuple[int, ...], axis: int | None, keepdims: bool) -> tuple[int, ...]:
    return _reduced_shape(shape, None if axis is None else (axis,), keepdims)


# --- both vocabularies ----------------------------------------------------------------------------------
def _index_reduction(draw: _Draw) -> None:
    """argmax or argmin of an input (distinct values: no ties to break differently)."""
    x = _input(draw, "input")
    v = draw.value(x)
    axis, keepdims = _axes(draw, len(v.shape)), draw(st.booleans(), "keepdims")
    if _count(v.shape, axis) == 0:  # refused by both libraries; braze only where an output reads it
        return
    op = draw(st.sampled_from(("argmax", "argmin")), "index reduction")
    draw.add(op, (x,), Value(_reduced(v.shape, axis, keepdims), "int", max(_count(v.shape, axis), 1)), axis, keepdims)


def _running_extreme(draw: _Draw) -> None:
    x = draw.pick("operand")
    v = draw.value(x)
    if not v.shape:
        return
    axis = draw(st.integers(0, len(v.shape) - 1), "axis")
    draw.add(draw(st.sampled_from(("cummax", "cummin")), "scan"), (x,), v, axis)


def _nan_aware(draw: _Draw) -> None:
    """NaN-ignoring math, in both libraries: fmax/fmin, logaddexp2 and sinc of any values."""
    op = draw(st.sampled_from(("fmax", "fmin", "logaddexp2", "sinc", "outer")), "nan-aware op")
    x = draw.pick("left")
    v = draw.value(x)
    if op == "sinc":
        draw.add(op, (x,), Value(v.shape, "float", 1.0, v.precise))
        return
    y = draw.pick("right")
    w = draw.value(y)
    if op == "outer":
        if len(v.shape) == len(w.shape) == 1:
            draw.add(op, (x, y), Value(v.shape + w.shape, "float", v.bound * w.bound, v.precise and w.precise))
        return
    shape = _broadcast(v, w)
    if shape is not None:
        bound = max(v.bound, w.bound) + (op == "logaddexp2")
        draw.add(op, (x, y), Value(shape, "float", bound, v.precise and w.precise))


def _holes(draw: _Draw) -> None:
    """NaN where an input is below a threshold, a value read by NaN-aware ops alone."""
    m = _input(draw, "mask input")
    x = draw.pick("operand")
    shape = _broadcast(draw.value(m), draw.value(x))
    if shape is not None:
        c = draw(st.sampled_from((0.0, -1.0, 2.0)), "threshold")
        draw.add("holes", (m, x), Value(shape, "float", draw.value(x).bound, holes=True), c)


NAN_REDUCTIONS = {"numpy": ("nansum", "nanmean", "nanmax", "nanmin", "nanvar", "nanstd"),
                  "torch": ("nansum", "nanmean")}


def _nan_ignoring(library: str):
    def nan_ignoring(draw: _Draw) -> None:
        holed = [i for i, v in enumerate(draw.program.values) if v.holes]
        if not holed:
            return _holes(draw)
        x = draw(st.sampled_from(holed), "holed operand")
        v = draw.value(x)
        op = draw(st.sampled_from((*NAN_REDUCTIONS[library], "fmax", "nan_to_num")), "nan-ignoring op")
        if op in ("fmax", "nan_to_num"):  # a value without holes again
            y = draw.pick("filler")
            shape = _broadcast(v, draw.value(y)) if op == "fmax" else v.shape
            if shape is not None:
                bound = max(v.bound, draw.value(y).bound)
                draw.add(op, (x, y) if op == "fmax" else (x,), Value(shape, "float", bound))
            return None
        axis, keepdims = _axes(draw, len(v.shape)), draw(st.booleans(), "keepdims")
        n = _count(v.shape, axis)
        if n == 0 and op in ("nanmax", "nanmin"):  # NumPy refuses a max of nothing
            return None
        ddof = draw(st.sampled_from((0, 1)), "ddof") if op in ("nanvar", "nanstd") else 0
        bound = {"nansum": v.bound * max(n, 1), "nanvar": 4 * v.bound**2, "nanstd": 2 * v.bound}.get(op, v.bound)
        draw.add(op, (x,), Value(_reduced(v.shape, axis, keepdims), "float", bound), axis, keepdims, ddof)
        return None

    return nan_ignoring


def _tests_of_inputs(draw: _Draw) -> None:
    """heaviside, signbit and isclose of inputs (they jump), and a count of nonzero integers."""
    op = draw(st.sampled_from(("heaviside", "signbit", "isclose", "count_nonzero")), "test")
    x = _input(draw, "input")
    v = draw.value(x)
    if op == "count_nonzero":
        ints = [i for i, w in enumerate(draw.program.values) if w.kind == "int"]
        if not ints:
            return
        x = draw(st.sampled_from(ints), "integers")
        v = draw.value(x)
        axis = _axes(draw, len(v.shape))
        draw.add(op, (x,), Value(_reduced(v.shape, axis, False), "int", max(_count(v.shape, axis), 1)), axis)
        return
    if op == "signbit":
        draw.add(op, (x,), Value(v.shape, "float", 1.0))
        return
    y = draw.pick("second") if op == "heaviside" else _input(draw, "second input")
    shape = _broadcast(v, draw.value(y))
    if shape is None:
        return
    if op == "heaviside":
        draw.add(op, (x, y), Value(shape, "float", max(1.0, draw.value(y).bound), draw.value(y).precise))
    else:
        draw.add(op, (x, y), Value(shape, "float", 1.0), draw(st.sampled_from((0.5, 1.0, 1e-8)), "atol"))


SHARED_STEPS = (_index_reduction, _running_extreme, _nan_aware, _tests_of_inputs)


# --- torch alone ----------------------------------------------------------------------------------------
def _torch_unary(draw: _Draw) -> None:
    op = draw(st.sampled_from(("erfc", "gelu", "gelu_tanh", "softshrink", "tanhshrink", "hardtanh", "logit",
                               "frac", "softmin", "glu", "float_power", "hardshrink", "threshold")), "torch unary")
    x = _input(draw, "input") if op in ("logit", "frac", "hardshrink", "threshold") else draw.pick("operand")
    v = draw.value(x)
    if op in ("softmin", "glu"):
        if not v.shape:
            return
        axis = draw(st.integers(-len(v.shape), len(v.shape) - 1), "dim")
        if op == "softmin":
            draw.add(op, (x,), Value(v.shape, "float", 1.0, v.precise), axis)
        elif v.shape[axis] % 2 == 0:
            shape = list(v.shape)
            shape[axis] //= 2
            draw.add(op, (x,), Value(tuple(shape), "float", v.bound, v.precise, derived=True), axis)
        return
    bound = {"erfc": 2.0, "tanhshrink": v.bound + 1, "hardtanh": 1.0, "logit": 4.6, "frac": 1.0,
             "float_power": v.bound**2}.get(op, v.bound)
    draw.add(op, (x,), Value(v.shape, "float", bound, v.precise))


def _torch_binary(draw: _Draw) -> None:
    op = draw(st.sampled_from(("xlogy", "rsub", *LOSSES)), "torch binary")
    x = draw.pick("input")
    y = _input(draw, "input") if op in ("xlogy", "bce_with_logits", "kl_div") else draw.pick("target")
    v, w = draw.value(x), draw.value(y)
    shape = _broadcast(v, w)
    if shape is None:
        return
    if op == "xlogy":
        draw.add(op, (x, y), Value(shape, "float", 1.3 * v.bound, v.precise))
        return
    if op == "rsub":
        draw.add(op, (x, y), Value(shape, "float", w.bound + 2 * v.bound, v.precise and w.precise))
        return
    if v.shape != w.shape:  # torch's losses warn and broadcast, or refuse, where the shapes differ
        return
    reduction = draw(st.sampled_from(("none", "mean", "sum") + (("batchmean",) if op == "kl_div" and shape else ())),
                     "reduction")
    parameter = draw(st.sampled_from((1.0, 0.5, 2.0)), "beta or delta")
    pointwise = {"mse_loss": (v.bound + w.bound) ** 2, "bce_with_logits": v.bound + 1, "kl_div": v.bound + 0.4,
                 "huber_loss": parameter * (v.bound + w.bound)}.get(op, v.bound + w.bound)
    n = max(math.prod(shape), 1)
    bound = pointwise * (n if reduction == "sum" else n / shape[0] if reduction == "batchmean" and shape[0] else 1)
    draw.add(op, (x, y), Value(() if reduction != "none" else shape, "float", bound), reduction, parameter)


def _torch_distances(draw: _Draw) -> None:
    """F.cosine_similarity and F.pairwise_distance of two inputs (near-zero vectors are ill-conditioned)."""
    op = draw(st.sampled_from(("cosine_similarity", "pairwise_distance")), "distance")
    x, y = _input(draw, "x1"), _input(draw, "x2")
    shape = _broadcast(draw.value(x), draw.value(y))
    if not shape:  # none, or a 0-d one: both reduce an axis
        return
    dim = draw(st.integers(-len(shape), len(shape) - 1), "dim") if op == "cosine_similarity" else -1
    keepdim = op == "pairwise_distance" and draw(st.booleans(), "keepdim")
    reduced = _reduced(shape, dim % len(shape), keepdim)
    bound = 1.0 if op == "cosine_similarity" else 6 * math.sqrt(max(shape[dim], 1)) + 1
    draw.add(op, (x, y), Value(reduced, "float", bound), dim, keepdim)


def _torch_moments(draw: _Draw) -> None:
    """var_mean and std_mean with a correction, aminmax, and cummax's indices: one output of each."""
    op = draw(st.sampled_from(("var_mean", "std_mean", "aminmax", "cummax_indices")), "torch moment")
    x = _input(draw, "input") if op == "cummax_indices" else draw.pick("operand")
    v = draw.value(x)
    which = draw(st.integers(0, 1), "which output")
    if op == "cummax_indices":
        if v.shape:
            draw.add(op, (x,), Value(v.shape, "int", max(v.shape)), draw(st.integers(0, len(v.shape) - 1), "dim"))
        return
    axis, keepdims = _axes(draw, len(v.shape)), draw(st.booleans(), "keepdims")
    n = _count(v.shape, axis)
    if op == "aminmax":
        if n:
            draw.add(op, (x,), Value(_reduced(v.shape, axis, keepdims), "float", v.bound, v.precise), axis, keepdims,
                     which)
        return
    correction = draw(st.sampled_from((0, 1)), "correction")
    bound = v.bound if which else 4 * v.bound**2 if op == "var_mean" else 2 * v.bound
    draw.add(op, (x,), Value(_reduced(v.shape, axis, keepdims), "float", bound, v.precise), axis, keepdims,
             correction, which)


TORCH_STEPS = (_torch_unary, _torch_binary, _torch_distances, _torch_moments, _nan_ignoring("torch"))


# --- NumPy alone ----------------------------------------------------------------------------------------
def _numpy_statistics(draw: _Draw) -> None:
    """np.ptp, np.average with weights, np.trapezoid and np.cov."""
    op = draw(st.sampled_from(("ptp", "average", "trapezoid", "cov", "corrcoef", "inner")), "statistic")
    x = _input(draw, "input") if op == "corrcoef" else draw.pick("operand")
    v = draw.value(x)
    if op == "inner":
        y = draw.pick("second")
        w = draw.value(y)
        if len(v.shape) == len(w.shape) == 1 and v.shape == w.shape:
            draw.add(op, (x, y), Value((), "float", v.bound * w.bound * max(v.shape[0], 1), v.precise and w.precise))
        return
    if op == "corrcoef":  # of an input's rows: not near constant, where it is ill-conditioned
        if len(v.shape) == 2 and v.shape[-1] >= 2:
            draw.add(op, (x,), Value((v.shape[0],) * 2 if v.shape[0] != 1 else (), "float", 1.0))
        return
    if op == "cov":
        if len(v.shape) in (1, 2) and v.shape[-1] >= 2:
            rows = v.shape[0] if len(v.shape) == 2 else 1  # NumPy's covariance of one variable is 0-d
            draw.add(op, (x,), Value((rows, rows) if rows != 1 else (), "float", 4 * v.bound**2, v.precise),
                     draw(st.booleans(), "bias"))
        return
    if op == "trapezoid":
        if v.shape:
            axis = draw(st.integers(-len(v.shape), len(v.shape) - 1), "axis")
            dx = draw(st.sampled_from((1.0, 0.5)), "dx")
            shape = v.shape[:axis % len(v.shape)] + v.shape[axis % len(v.shape) + 1:]
            draw.add(op, (x,), Value(shape, "float", v.bound * max(v.shape[axis], 1) * dx, v.precise), axis, dx)
        return
    axis, keepdims = _axes(draw, len(v.shape)), draw(st.booleans(), "keepdims")
    if _count(v.shape, axis) == 0:  # NumPy refuses both over nothing
        return
    draw.add(op, (x,), Value(_reduced(v.shape, axis, keepdims), "float", 2 * v.bound, v.precise), axis, keepdims)


def _numpy_shapes(draw: _Draw) -> None:
    """np.gradient, np.diff with prepend= and append=, np.clip with NumPy 2's min=/max=, np.round."""
    op = draw(st.sampled_from(("gradient", "diff", "clip", "round")), "numpy op")
    x = _input(draw, "input") if op == "round" else draw.pick("operand")
    v = draw.value(x)
    if op == "clip":
        lo, hi = draw(st.sampled_from(((-1.0, 1.0), (0.0, 2.5), (None, 0.5), (-0.5, None))), "bounds")
        draw.add(op, (x,), Value(v.shape, "float", max(abs(b) for b in (lo, hi) if b is not None) if lo is not None
                                 and hi is not None else v.bound, v.precise), lo, hi)
        return
    if op == "round":
        decimals = draw(st.sampled_from((0, 1, 2)), "decimals")
        draw.add(op, (x,), Value(v.shape, "float", v.bound + 1, v.precise), decimals)
        return
    if not v.shape:
        return
    axis = draw(st.integers(0, len(v.shape) - 1), "axis")
    if op == "gradient":
        edge_order = draw(st.sampled_from((1, 2)), "edge order")
        if v.shape[axis] > edge_order:
            draw.add(op, (x,), Value(v.shape, "float", 4 * v.bound, v.precise), axis, edge_order)
        return
    prepend, append = draw(st.sampled_from(((None, None), (0.5, None), (None, -1.0), (1.0, 2.0))), "ends")
    extent = v.shape[axis] + (prepend is not None) + (append is not None)
    shape = v.shape[:axis] + (max(extent - 1, 0),) + v.shape[axis + 1:]
    draw.add(op, (x,), Value(shape, "float", 2 * v.bound + 2, v.precise, derived=True), axis, prepend, append)


NUMPY_STEPS = (_numpy_statistics, _numpy_shapes, _nan_ignoring("numpy"), *SCIENCE_STEPS)


def library_steps(library: str | None) -> tuple:
    """The steps a program in `library`'s vocabulary may draw beside tests/jit_programs.py's own."""
    return {None: (), "numpy": SHARED_STEPS + NUMPY_STEPS, "torch": SHARED_STEPS + TORCH_STEPS}[library]


# --- the spellings ------------------------------------------------------------------------------------------
def numpy_spelling(op: str, xs: list, params: tuple, f32: type):
    """The step in NumPy's functions (a torch-only one through torch, eagerly: never traced)."""
    if op in TORCH_ONLY:
        return _through_torch(op, xs, params)
    if op in SCIENCE_OPS:
        return science_spelling(op, xs, params)
    x = xs[0]
    match op:
        case "argmax" | "argmin" | "ptp":
            return getattr(np, op)(x, axis=params[0], keepdims=params[1])
        case "cummax" | "cummin":
            return (np.maximum if op == "cummax" else np.minimum).accumulate(x, axis=params[0])
        case "fmax" | "fmin" | "logaddexp2" | "outer" | "heaviside":
            return getattr(np, op)(x, xs[1])
        case "sinc":
            return np.sinc(x)
        case "signbit":
            return np.signbit(x).astype(f32)
        case "isclose":
            return np.isclose(x, xs[1], atol=params[0]).astype(f32)
        case "count_nonzero":
            return np.count_nonzero(x, axis=params[0])
        case "holes":
            return np.where(x > params[0], xs[1], np.nan)
        case "nan_to_num":
            return np.nan_to_num(x, nan=0.0)
        case "nansum" | "nanmean" | "nanmax" | "nanmin":
            return getattr(np, op)(x, axis=params[0], keepdims=params[1])
        case "nanvar" | "nanstd":
            return getattr(np, op)(x, axis=params[0], keepdims=params[1], ddof=params[2])
        case "average":
            return np.average(x, axis=params[0], weights=np.abs(x) + 1, keepdims=params[1])
        case "trapezoid":
            return np.trapezoid(x, dx=params[1], axis=params[0])
        case "cov":
            return np.cov(x, bias=params[0])
        case "corrcoef":
            return np.corrcoef(x)
        case "inner":
            return np.inner(x, xs[1])
        case "gradient":
            return np.gradient(x, axis=params[0], edge_order=params[1])
        case "diff":
            ends = {k: v for k, v in zip(("prepend", "append"), params[1:]) if v is not None}
            return np.diff(x, axis=params[0], **ends)
        case "clip":
            return np.clip(x, min=params[0], max=params[1])
        case "round":
            return np.round(x, decimals=params[0])
    raise AssertionError(op)


def _through_torch(op: str, xs: list, params: tuple):
    """A torch-only step on NumPy arrays, for the dtype it gives: operands in their common dtype first,
    so torch's rule for a 0-d tensor meeting a larger one never decides it."""
    import torch

    common = np.result_type(*xs)
    tensors = [torch.from_numpy(np.array(x, dtype=common)) for x in xs]
    return torch_spelling(op, tensors, params, torch.float32).numpy()


def torch_spelling(op: str, xs: list, params: tuple, f32):
    """The step in torch's functions and torch.nn.functional."""
    import torch
    import torch.nn.functional as F  # noqa: N812  (torch's own spelling)

    x = xs[0]
    dim = () if params and params[0] is None else params[0] if params else None
    match op:
        case "argmax" | "argmin":
            return getattr(torch, op)(x, dim=params[0], keepdim=params[1])
        case "cummax" | "cummin":
            return getattr(torch, op)(x, dim=params[0]).values
        case "cummax_indices":
            return torch.cummax(x, dim=params[0]).indices
        case "fmax" | "fmin" | "logaddexp2" | "outer" | "heaviside" | "xlogy":
            other = torch.abs(xs[1]) + 0.5 if op == "xlogy" else xs[1]
            return getattr(torch, op)(x, other)
        case "sinc" | "erfc" | "frac":
            return getattr(torch, op)(x)
        case "signbit":
            return torch.signbit(x).to(f32)
        case "isclose":
            return torch.isclose(x, xs[1], atol=params[0]).to(f32)
        case "count_nonzero":
            return torch.count_nonzero(x, dim=params[0])
        case "holes":
            return torch.where(x > params[0], xs[1], float("nan"))
        case "nan_to_num":
            return torch.nan_to_num(x, nan=0.0)
        case "nansum" | "nanmean":
            return getattr(torch, op)(x, dim=dim, keepdim=params[1])
        case "gelu" | "gelu_tanh":
            return F.gelu(x, approximate="tanh" if op == "gelu_tanh" else "none")
        case "softshrink" | "tanhshrink" | "hardtanh" | "hardshrink":
            return getattr(F, op)(x)
        case "threshold":
            return F.threshold(x, 0.5, -1.0)
        case "float_power":
            return torch.float_power(x, 2)
        case "cosine_similarity":
            return F.cosine_similarity(x, xs[1], dim=params[0])
        case "pairwise_distance":
            return F.pairwise_distance(x, xs[1], keepdim=params[1])
        case "logit":
            return torch.logit(torch.sigmoid(x), eps=0.01)
        case "softmin" | "glu":
            return getattr(F, op)(x, dim=params[0])
        case "rsub":
            return torch.rsub(x, xs[1], alpha=2)
        case "var_mean" | "std_mean":
            return getattr(torch, op)(x, dim=dim, keepdim=params[1], correction=params[2])[params[3]]
        case "aminmax":
            return torch.aminmax(x, dim=params[0], keepdim=params[1])[params[2]]
    return _torch_loss(op, xs, params)


def _torch_loss(op: str, xs: list, params: tuple):
    import torch.nn.functional as F  # noqa: N812

    x, y = xs
    reduction, parameter = params
    match op:
        case "mse_loss" | "l1_loss":
            return getattr(F, op)(x, y, reduction=reduction)
        case "smooth_l1_loss":
            return F.smooth_l1_loss(x, y, reduction=reduction, beta=parameter)
        case "huber_loss":
            return F.huber_loss(x, y, reduction=reduction, delta=parameter)
        case "bce_with_logits":
            return F.binary_cross_entropy_with_logits(x, y.sigmoid(), reduction=reduction)
        case "kl_div":
            return F.kl_div(x, y.sigmoid(), reduction=reduction)
    raise AssertionError(op)
