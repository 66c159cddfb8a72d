"""Composites (softmax, log_softmax, layer_norm, rms_norm, cross_entropy) against float64 formulas
written out by hand, on half, single, double and integer inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from oracle import FLOAT_DTYPES, assert_matches, define, execute, rng_for, run

import braze as bz

# NumPy warnings (overflow, invalid casts, empty means) must not leak out of braze.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

COMPOSITES_COVERED = frozenset({"softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy", "nll_loss"})
K = 2  # composites round the result once but compute several float32 steps before it
DTYPES = (*FLOAT_DTYPES, bz.int32)


def _id(value: object) -> str:
    return value.name if isinstance(value, bz.DType) else str(value)


def _sample(dtype: bz.DType, shape: tuple[int, ...], *salt: object, scale: float = 3.0) -> np.ndarray:
    rng = rng_for("composite", dtype.name, shape, *salt)
    if dtype.kind in "iu":
        return rng.integers(-5 if dtype.kind == "i" else 0, 6, shape).astype(dtype.numpy)
    return rng.uniform(-scale, scale, shape).astype(dtype.numpy)


def _result(dtype: bz.DType) -> bz.DType:
    return dtype if dtype.kind == "f" else bz.float32


def softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def layer_norm64(x, weight, bias, eps, axes) -> np.ndarray:
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1 if weight is None else weight) + (0 if bias is None else bias)


def rms_norm64(x, weight, eps, axes) -> np.ndarray:
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return y * (1 if weight is None else weight)


def cross_entropy64(logits: np.ndarray, target: np.ndarray, reduction: str) -> np.ndarray:
    log_probs = log_softmax64(logits, -1)
    loss = -np.take_along_axis(log_probs, target[..., None].astype(np.int64), -1)[..., 0]
    return {"none": loss, "sum": loss.sum(), "mean": loss.mean()}[reduction]


def torch_cross_entropy64(logits: np.ndarray, target: np.ndarray, reduction: str, weight: np.ndarray | None,
                          ignore_index: int, label_smoothing: float) -> np.ndarray:
    """torch's F.cross_entropy over class indices, written out: ignored rows lose nothing and do not
    count; the mean divides by the weights of the counted targets; smoothing mixes in the uniform."""
    log_probs = log_softmax64(logits, -1)
    w = np.ones(logits.shape[-1]) if weight is None else weight
    counted = target != ignore_index
    safe = np.where(counted, target, 0).astype(np.int64)
    picked = -np.take_along_axis(log_probs * w, safe[..., None], -1)[..., 0]
    uniform = -(log_probs * w).mean(-1)
    loss = np.where(counted, (1 - label_smoothing) * picked + label_smoothing * uniform, 0.0)
    with np.errstate(invalid="ignore"):
        mean = loss.sum() / np.where(counted, w[safe], 0.0).sum()
    return {"none": loss, "sum": loss.sum(), "mean": mean}[reduction]


def f64(*arrays: np.ndarray | None) -> list[np.ndarray | None]:
    return [None if a is None else a.astype(np.float64) for a in arrays]


# --- softmax and log_softmax --------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis", [((4, 9), -1), ((4, 9), 0), ((2, 5, 3), 1), ((6,), 0)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_softmax_and_log_softmax(dtype, shape, axis):
    x = _sample(dtype, shape, axis)
    soft, log_soft = execute(lambda f: [bz.ops.softmax(t := define(f, x), axis), bz.ops.log_softmax(t, axis)], [x])
    (x64,) = f64(x)
    assert_matches(soft, softmax64(x64, axis), _result(dtype), k=K, what="softmax")
    assert_matches(log_soft, log_softmax64(x64, axis), _result(dtype), k=K, scale=np.abs(x64).max(), what="log_softmax")
    assert_matches(soft.astype(np.float64).sum(axis), np.ones(np.delete(shape, axis)), bz.float64, k=1e9)


@pytest.mark.parametrize("dtype", [bz.float16, bz.float32], ids=_id)
def test_softmax_is_stable_for_large_logits(dtype):
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1001.0, -math.inf]], dtype.numpy)
    if dtype == bz.float16:
        x = np.array([[60000.0, 60001.0, 59999.0], [-60000.0, -60001.0, -math.inf]]).astype(np.float16)
    soft, log_soft = execute(lambda f: [bz.ops.softmax(t := define(f, x)), bz.ops.log_softmax(t)], [x])
    (x64,) = f64(x)
    assert np.isfinite(soft).all()
    assert_matches(soft, softmax64(x64, -1), dtype, k=K)
    assert_matches(log_soft, log_softmax64(x64, -1), dtype, k=K)


# --- layer_norm and rms_norm --------------------------------------------------------------------
NORM_CASES = [
    # (x shape, axes, weight shape, bias shape)
    ((4, 8), -1, None, None),
    ((4, 8), -1, (8,), (8,)),
    ((4, 8), -1, (8,), None),
    ((2, 3, 4), (1, 2), (3, 4), (4,)),
    ((2, 3, 4), [-2, -1], None, (3, 1)),
    ((3, 5), 0, (3, 1), None),
]


@pytest.mark.parametrize("case", NORM_CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_layer_norm(dtype, case):
    shape, axes, w_shape, b_shape = case
    x = _sample(dtype, shape, "ln", case)
    param = dtype if dtype.kind == "f" else bz.float32
    w = None if w_shape is None else _sample(param, w_shape, "w", case, scale=2.0)
    b = None if b_shape is None else _sample(param, b_shape, "b", case, scale=2.0)
    with bz.Fusion() as f:
        tx = define(f, x)
        tw = None if w is None else define(f, w)
        tb = None if b is None else define(f, b)
        f.add_output(bz.ops.layer_norm(tx, tw, tb, eps=1e-5, axes=axes))
    (out,) = run(f, [a for a in (x, w, b) if a is not None])
    axes_tuple = tuple(np.atleast_1d(axes) % len(shape))
    expected = layer_norm64(*f64(x, w, b), 1e-5, axes_tuple)
    assert_matches(out, expected, _result(dtype), k=K, scale=4.0, what=f"layer_norm {case}")


@pytest.mark.parametrize("case", [c for c in NORM_CASES if c[3] is None], ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=_id)
def test_rms_norm(dtype, case):
    shape, axes, w_shape, _ = case
    x = _sample(dtype, shape, "rms", case)
    w = None if w_shape is None else _sample(dtype if dtype.kind == "f" else bz.float32, w_shape, "w", case)
    with bz.Fusion() as f:
        tx = define(f, x)
        f.add_output(bz.ops.rms_norm(tx, None if w is None else define(f, w), eps=1e-6, axes=axes))
    (out,) = run(f, [a for a in (x, w) if a is not None])
    axes_tuple = tuple(np.atleast_1d(axes) % len(shape))
    assert_matches(out, rms_norm64(*f64(x, w), 1e-6, axes_tuple), _result(dtype), k=K, scale=4.0, what="rms_norm")


@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_norm_eps_is_used(eps):
    x = np.array([[0.0, 0.004, -0.004, 0.002]], np.float32)  # a variance near 1e-5: either eps moves the result
    ln, rms = execute(lambda f: [bz.ops.layer_norm(t := define(f, x), eps=eps), bz.ops.rms_norm(t, eps=eps)], [x])
    (x64,) = f64(x)
    assert_matches(ln, layer_norm64(x64, None, None, eps, (1,)), bz.float32)
    assert_matches(rms, rms_norm64(x64, None, eps, (1,)), bz.float32)


# --- cross_entropy --------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target_dtype", [bz.int64, bz.int32, bz.int8], ids=_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=_id)
def test_cross_entropy(dtype, target_dtype, reduction):
    rng = rng_for("ce", dtype.name, target_dtype.name, reduction)
    logits = rng.uniform(-3, 3, (5, 7)).astype(dtype.numpy)
    target = rng.integers(0, 7, 5).astype(target_dtype.numpy)
    (out,) = execute(lambda f: bz.ops.cross_entropy(define(f, logits), define(f, target), reduction), [logits, target])
    expected = cross_entropy64(logits.astype(np.float64), target, reduction)
    assert_matches(out, np.asarray(expected), dtype, k=K, what=f"cross_entropy {reduction}")


def test_cross_entropy_over_batched_rows():
    rng = rng_for("ce3")
    logits = rng.uniform(-4, 4, (2, 3, 6)).astype(np.float32)
    target = rng.integers(0, 6, (2, 3))
    for reduction in ("none", "mean"):
        (out,) = execute(lambda f, r=reduction: bz.ops.cross_entropy(define(f, logits), define(f, target), r),
                         [logits, target])
        assert_matches(out, np.asarray(cross_entropy64(logits.astype(np.float64), target, reduction)), bz.float32)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("options", [{}, {"label_smoothing": 0.2}, {"ignore_index": 3}, {"weighted": True},
                                     {"weighted": True, "ignore_index": 0, "label_smoothing": 0.1}], ids=str)
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=_id)
def test_cross_entropy_takes_torchs_options(dtype, options, reduction):
    """ignore_index (-100 by default: language models' padding), weight and label_smoothing as torch
    has them: an ignored row adds nothing and does not count in the mean."""
    rng = rng_for("ce-options", dtype.name, str(options), reduction)
    logits = rng.uniform(-3, 3, (7, 5)).astype(dtype.numpy)
    target = rng.integers(0, 5, 7)
    target[[1, 4]] = options.get("ignore_index", -100)
    weight = rng.uniform(0.2, 2.0, 5).astype(dtype.numpy) if options.get("weighted") else None
    kwargs = {k: v for k, v in options.items() if k != "weighted"}

    def build(f):
        x, t = define(f, logits), define(f, target)
        w = None if weight is None else define(f, weight)
        return bz.ops.cross_entropy(x, t, reduction, weight=w, **kwargs)

    (out,) = execute(build, [logits, target] + ([] if weight is None else [weight]))
    expected = torch_cross_entropy64(*f64(logits), target, reduction, *f64(weight), kwargs.get("ignore_index", -100),
                                     kwargs.get("label_smoothing", 0.0))
    assert_matches(out, np.asarray(expected), dtype, k=K, what=f"cross_entropy {reduction} {options}")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("options", [{}, {"ignore_index": 3}, {"weighted": True}, {"class_axis": 0}], ids=str)
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=_id)
def test_nll_loss_is_cross_entropy_of_given_log_probabilities(dtype, options, reduction):
    """torch's F.nll_loss: -log_probs at the target, with cross_entropy's options (an ignored row adds
    nothing and does not count; the mean divides by the counted targets' weights)."""
    rng = rng_for("nll", dtype.name, str(options), reduction)
    log_probs = log_softmax64(rng.uniform(-3, 3, (7, 5)), -1).astype(dtype.numpy)
    target = rng.integers(0, 5, 7)
    target[[1, 4]] = options.get("ignore_index", -100)
    weight = rng.uniform(0.2, 2.0, 5).astype(dtype.numpy) if options.get("weighted") else None
    scores = log_probs.T.copy() if "class_axis" in options else log_probs  # classes first, then rows

    def build(f):
        x, t = define(f, scores), define(f, target)
        w = None if weight is None else define(f, weight)
        return bz.ops.nll_loss(x, t, reduction, weight=w, ignore_index=options.get("ignore_index", -100),
                               class_axis=options.get("class_axis", -1))

    (out,) = execute(build, [scores, target] + ([] if weight is None else [weight]))
    expected = _nll64(*f64(log_probs), target, reduction, *f64(weight), options.get("ignore_index", -100))
    assert_matches(out, np.asarray(expected), dtype, k=K, what=f"nll_loss {reduction} {options}")


def _nll64(log_probs: np.ndarray, target: np.ndarray, reduction: str, weight: np.ndarray | None,
           ignore_index: int) -> np.ndarray:
    w = np.ones(log_probs.shape[-1]) if weight is None else weight
    counted = target != ignore_index
    safe = np.where(counted, target, 0).astype(np.int64)
    loss = np.where(counted, -np.take_along_axis(log_probs, safe[:, None], -1)[:, 0] * w[safe], 0.0)
    with np.errstate(invalid="ignore"):
        mean = loss.sum() / np.where(counted, w[safe], 0.0).sum()
    return {"none": loss, "sum": loss.sum(), "mean": mean}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("shape", [(2, 5, 3), (2, 4, 3, 2), (6, 4)], ids=str)
def test_cross_entropy_takes_torchs_layout_with_class_axis_1(shape, reduction):
    """torch's logits (N, C, d1, ...) with target (N, d1, ...): the classes along axis 1."""
    rng = rng_for("ce-layout", str(shape), reduction)
    logits = rng.uniform(-3, 3, shape).astype(np.float32)
    target = rng.integers(0, shape[1], (shape[0], *shape[2:]))
    target.flat[1] = -100
    weight = rng.uniform(0.2, 2.0, shape[1]).astype(np.float32)
    out = bz.jit(lambda x, t, w: bz.ops.cross_entropy(x, t, reduction, weight=w, label_smoothing=0.1,
                                                      class_axis=1))(logits, target, weight)
    classes_last = np.moveaxis(logits.astype(np.float64), 1, -1)
    expected = torch_cross_entropy64(classes_last, target, reduction, weight.astype(np.float64), -100, 0.1)
    assert_matches(out, np.asarray(expected), bz.float32, k=K, what=f"cross_entropy class_axis=1 {shape}")


def test_cross_entropy_in_torchs_layout_without_class_axis_names_it():
    with bz.Fusion() as f:
        x, t = f.define_tensor((2, 3, 4)), f.define_tensor((2, 4), bz.int64)
        with pytest.raises(bz.FusionDefinitionError, match=r"classes along axis 1.*class_axis=1"):
            bz.ops.cross_entropy(x, t)
    logits, target = np.zeros((2, 3, 4), np.float32), np.zeros((2, 4), np.int64)
    with pytest.raises(bz.InputError, match=r"cross_entropy: dimension 1 of logits .* class_axis=1"):
        bz.jit(lambda x, t: bz.ops.cross_entropy(x, t))(logits, target)  # symbolic extents: checked at run time


def test_cross_entropy_mean_over_only_ignored_rows_is_nan():
    logits, target = np.zeros((3, 4), np.float32), np.full(3, -100)
    (out,) = execute(lambda f: bz.ops.cross_entropy(define(f, logits), define(f, target)), [logits, target])
    assert np.isnan(out)


# --- definition errors ------------------------------------------------------------------------
ERRORS = [
    ("softmax", lambda x, t: bz.ops.softmax(2.0)),
    ("log_softmax", lambda x, t: bz.ops.log_softmax([1.0])),
    ("layer_norm", lambda x, t: bz.ops.layer_norm(1.0)),
    ("rms_norm", lambda x, t: bz.ops.rms_norm(None)),
    ("cross_entropy.*reduction", lambda x, t: bz.ops.cross_entropy(x, t, reduction="avg")),
    ("cross_entropy.*target.*float32", lambda x, t: bz.ops.cross_entropy(x, x[:, 0])),
    ("cross_entropy.*target.*rank", lambda x, t: bz.ops.cross_entropy(x, t[None])),
    ("cross_entropy.*logits", lambda x, t: bz.ops.cross_entropy(2.0, t)),
    ("cross_entropy.*weight.*1-D", lambda x, t: bz.ops.cross_entropy(x, t, weight=x)),
    ("cross_entropy.*ignore_index", lambda x, t: bz.ops.cross_entropy(x, t, ignore_index=1.5)),
    ("cross_entropy.*label_smoothing", lambda x, t: bz.ops.cross_entropy(x, t, label_smoothing=2.0)),
    ("cross_entropy class_axis", lambda x, t: bz.ops.cross_entropy(x, t, class_axis=2)),
]


@pytest.mark.parametrize("match,build", ERRORS, ids=[m for m, _ in ERRORS])
def test_definition_errors(match, build):
    with bz.Fusion() as f:
        x = f.define_tensor(shape=(-1, -1))
        t = f.define_tensor(shape=(-1,), dtype=bz.int64)
        with pytest.raises(bz.FusionDefinitionError, match=match):
            build(x, t)
