"""The demo gallery: small fusions users write, each checked against a float64 NumPy version and
timed against the fastest NumPy formulation of the same computation on the same float32 data."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import braze as bz
from braze import engine


@dataclass
class GalleryEntry:
    name: str
    build: Callable[[bz.Fusion], None]  # defines inputs, ops and outputs
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    expected: Callable[..., np.ndarray]  # float64 NumPy, from the same inputs: the accuracy reference
    numpy: Callable[..., np.ndarray] | None = None  # the NumPy formulation timed (default: `expected`)

    def numpy_version(self) -> Callable[..., np.ndarray]:
        return self.numpy or self.expected


@dataclass
class DemoRow:
    name: str
    size: str  # the first input's shape, `256x512`
    ops: int
    kernels: int  # tasks launched per call
    max_error: float
    backend: str
    first_call_ms: float  # compiling (or loading from the disk cache) included
    ms_per_call: float  # the cached call
    numpy_ms_per_call: float

    @property
    def speedup(self) -> float:
        return self.numpy_ms_per_call / self.ms_per_call if self.ms_per_call else float("inf")


def _erf_reference(x: np.ndarray) -> np.ndarray:
    """erf to the last bit of a float64 (math.erf per element): the accuracy reference, never timed."""
    return np.vectorize(math.erf)(x)


def _erf_polynomial(x: np.ndarray) -> np.ndarray:
    """erf in plain NumPy (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7): what NumPy users write
    without SciPy."""
    t = 1 / (1 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1 - poly * np.exp(-x * x))


@functools.cache
def numpy_erf() -> tuple[str, Callable[[np.ndarray], np.ndarray]]:
    """The fastest erf NumPy users have here: SciPy's where installed, else a NumPy polynomial."""
    try:
        from scipy.special import erf
    except ImportError:
        return "a NumPy polynomial (Abramowitz-Stegun 7.1.26; SciPy is not installed)", _erf_polynomial
    return "scipy.special.erf", erf


def _gelu_bias_numpy(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    t = x + b
    return 0.5 * t * (1 + numpy_erf()[1](t * np.float32(1 / math.sqrt(2))))


def _gelu_bias(f: bz.Fusion) -> None:
    x, b = f.define_tensor((-1, -1), name="x"), f.define_tensor((-1,), name="b")
    f.add_output(bz.ops.gelu(x + b))


def _rope(f: bz.Fusion) -> None:
    x = f.define_tensor((-1, -1, 64), name="x")  # (batch, tokens, head_dim)
    cos, sin = f.define_tensor((-1, 32), name="cos"), f.define_tensor((-1, 32), name="sin")
    x1, x2 = x[..., :32], x[..., 32:]
    f.add_output(bz.ops.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1))


def _rope_expected(x, cos, sin):
    x1, x2 = x[..., :32], x[..., 32:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _layer_norm(f: bz.Fusion) -> None:
    x = f.define_tensor((-1, -1), name="x")
    w, b = f.define_tensor((-1,), name="weight"), f.define_tensor((-1,), name="bias")
    f.add_output(bz.ops.layer_norm(x, w, b))


def _layer_norm_expected(x, w, b):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b


def _softmax_expected(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _cross_entropy_expected(logits, target):
    log_probs = np.log(_softmax_expected(logits))
    return -log_probs[np.arange(len(target)), target].mean()


def _normal(*shape):
    return lambda rng: rng.standard_normal(shape).astype(np.float32)


GALLERY = [
    GalleryEntry("gelu_bias", _gelu_bias, lambda r: [_normal(256, 512)(r), _normal(512)(r)],
                 lambda x, b: 0.5 * (x + b) * (1 + _erf_reference((x + b) / math.sqrt(2))), _gelu_bias_numpy),
    GalleryEntry("rope", _rope, lambda r: [_normal(4, 128, 64)(r), _normal(128, 32)(r), _normal(128, 32)(r)],
                 _rope_expected),
    GalleryEntry("layer_norm", _layer_norm, lambda r: [_normal(256, 512)(r), _normal(512)(r), _normal(512)(r)],
                 _layer_norm_expected),
    GalleryEntry("rms_norm", lambda f: f.add_output(bz.ops.rms_norm(f.define_tensor((-1, -1)))),
                 lambda r: [_normal(256, 512)(r)],
                 lambda x: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)),
    GalleryEntry("softmax", lambda f: f.add_output(bz.ops.softmax(f.define_tensor((-1, -1)))),
                 lambda r: [_normal(256, 512)(r)], _softmax_expected),
    GalleryEntry("cross_entropy",
                 lambda f: f.add_output(bz.ops.cross_entropy(f.define_tensor((-1, -1)),
                                                             f.define_tensor((-1,), dtype=bz.int64))),
                 lambda r: [_normal(256, 100)(r), r.integers(0, 100, 256)], _cross_entropy_expected),
]


def _ms_per_call(fn: Callable[[], object], repeats: int) -> float:
    """The median over `repeats` batches of the time per call, in milliseconds (after the caller's
    warm-up); a batch runs ~5 ms of calls, so microsecond calls are not lost in the clock's noise."""
    start = time.perf_counter()
    fn()
    calls = max(1, min(10_000, int(0.005 / max(time.perf_counter() - start, 1e-7))))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    return sorted(samples)[len(samples) // 2] * 1e3


def run_entry(entry: GalleryEntry, backend: str, seed: int = 0, repeats: int = 5) -> DemoRow:
    """Builds and runs one fusion; the error is the max |braze - float64 NumPy| over the output."""
    with bz.Fusion(name=entry.name) as f:
        entry.build(f)
    inputs = entry.inputs(np.random.default_rng(seed))
    # The default backend is asked for as a user would, by naming none: that takes the cached call.
    chosen = {} if backend == engine.DEFAULT_BACKEND else {"backend": backend}
    start = time.perf_counter()
    (result,) = f.execute(inputs, **chosen)  # the first call: compiles, or loads from the disk cache
    first_call_ms = (time.perf_counter() - start) * 1e3
    with bz.record() as rec:
        f.execute(inputs, **chosen)
    as_float64 = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in inputs]
    expected = entry.expected(*as_float64)
    error = float(np.max(np.abs(result.astype(np.float64) - expected)))
    braze_ms = _ms_per_call(lambda: f.execute(inputs, **chosen), repeats)
    numpy_version = entry.numpy_version()
    numpy_ms = _ms_per_call(lambda: numpy_version(*inputs), repeats)  # NumPy on the same float32 data
    size = "x".join(map(str, inputs[0].shape))
    return DemoRow(entry.name, size, len(f.exprs), len(rec.launches), error, backend, first_call_ms, braze_ms,
                   numpy_ms)


def run_gallery(backend: str | None = None) -> list[DemoRow]:
    """Every gallery fusion on `backend` (the default backend when None)."""
    return [run_entry(entry, backend or engine.DEFAULT_BACKEND) for entry in GALLERY]
