"""What braze/cli/bench/suite.py shares between its GPU and CPU sections: each case's inputs and float64
reference, the check of a result against it (outputs as host arrays with their dtype names), the
byte count, and the JAX peer."""

from __future__ import annotations

import itertools
import os
import statistics
import time

import numpy as np

import braze as bz
from braze.cli.bench.cases import DROPOUT_P, DROPOUT_SEED, Case

TOLERANCE = {"float32": 1e-4, "float64": 1e-10, "bfloat16": 2e-2, "float16": 4e-3}  # of the largest |value|


# --- the reference and the check ----------------------------------------------------------------------
def build_fusion(case: Case, shape: tuple[int, ...]) -> bz.Fusion:
    with bz.Fusion(name=case.name) as f:
        case.build(f, shape, bz.dtypes.as_dtype(case.dtype))
    return f


def braze_keep_mask(shape: tuple[int, ...]) -> np.ndarray:
    """The dropout mask braze's fusion draws: rand(seed=DROPOUT_SEED) >= p, from the reference backend
    (the same Philox numbers on every backend)."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1,) * len(shape))
        f.add_output(bz.ops.rand(x.shape, seed=DROPOUT_SEED) >= DROPOUT_P)
    return f.execute([np.empty(shape, np.float32)], backend="reference")[0]


def is_float(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind == "f" or getattr(a, "dtype", None) == bz.bfloat16.numpy


def reference(case: Case, inputs: list, keep) -> list[np.ndarray]:
    """The case's math in float64 on the inputs as given (bfloat16 values upcast exactly)."""
    wide = [a.astype(np.float64) if is_float(a) else a for a in inputs]
    extra = {"keep": keep} if case.dropout else {}
    return [np.asarray(o) for o in case.math(np, *wide, **extra)]


def mismatch(got: list[tuple[np.ndarray, str]], want: list[np.ndarray]) -> str | None:
    """Why `got` (arrays with their dtype names) is not `want`, or None when it is within tolerance."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, ((g, dtype), w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, expected {w.shape}"
        if dtype not in TOLERANCE:
            differ = int(np.count_nonzero(g.astype(np.int64) != w.astype(np.int64)))
            if differ:
                return f"output {i}: {differ} of {w.size} elements differ"
            continue
        if not np.isfinite(g).all():
            return f"output {i}: {int(np.count_nonzero(~np.isfinite(g)))} of {g.size} elements not finite"
        scale = float(np.abs(w).max()) if w.size else 1.0
        error = float(np.abs(g - w).max()) / (scale or 1.0) if w.size else 0.0
        if error > TOLERANCE[dtype]:
            return f"output {i} ({dtype}): max error {error:.2g} of the largest |value| (allowed {TOLERANCE[dtype]})"
    return None


def failed(error: BaseException) -> dict:
    text = (str(error).strip().splitlines() or [""])[0]
    return {"status": "FAIL", "error": f"{type(error).__name__}: {text}"[:300]}


def measure(check, time_ms, want: list[np.ndarray], nbytes: int) -> dict:
    """Checks one implementation (check() returns its outputs as (array, dtype name) pairs), then times
    it (time_ms() returns milliseconds). Never raises."""
    try:
        problem = mismatch(check(), want)
    except Exception as e:  # noqa: BLE001  (a failure is a row of the table, not the end of the suite)
        return failed(e)
    if problem:
        return {"status": "WRONG", "error": problem}
    try:
        ms = time_ms()
    except Exception as e:  # noqa: BLE001
        return failed(e)
    return {"status": "ok", "ms": ms, "gbps": nbytes / ms / 1e6}


def output_dtypes(fusion: bz.Fusion | None, case: Case, count: int) -> list:
    """The numpy dtypes of the fusion's outputs (the case's dtype where braze could not define it)."""
    if fusion is not None:
        return [o.tv.dtype.numpy for o in fusion.returned_outputs]
    return [bz.dtypes.as_dtype(case.dtype).numpy] * count


def traffic(inputs: list, want: list[np.ndarray], dtypes: list) -> int:
    """Bytes that must cross DRAM: each input read once, each output written once."""
    read = sum(a.nbytes for a in inputs if isinstance(a, np.ndarray))
    return read + sum(w.size * np.dtype(d).itemsize for w, d in zip(want, dtypes))


class Prepared:
    """A case's inputs, float64 reference, output dtypes and byte count at one shape."""

    def __init__(self, case: Case, mode: str) -> None:
        self.case, self.shape = case, case.shape(mode)
        self.inputs = case.inputs(np.random.default_rng(0), self.shape, bz.dtypes.as_dtype(case.dtype).numpy)
        self.keep = braze_keep_mask(self.inputs[0].shape) if case.dropout else None
        self.want = reference(case, self.inputs, self.keep)
        try:
            self.fusion, self.build_error = build_fusion(case, self.shape), None
        except Exception as e:  # noqa: BLE001
            self.fusion, self.build_error = None, e
        self.dtypes = output_dtypes(self.fusion, case, len(self.want))
        self.nbytes = traffic(self.inputs, self.want, self.dtypes)

    def row(self) -> dict:
        return {"case": self.case.name, "fusion": self.case.title, "dtype": self.case.dtype,
                "shape": list(self.shape), "bytes": self.nbytes}


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def host(a) -> tuple[np.ndarray, str]:
    """A NumPy, torch or JAX output as (float64 or int64 host array, its dtype name)."""
    name = dtype_name(a.dtype)
    if hasattr(a, "detach"):  # torch
        a = a.detach().float().cpu().numpy() if a.is_floating_point() else a.detach().cpu().numpy()
    a = np.asarray(a)
    return a.astype(np.float64 if name in TOLERANCE else np.int64), name


# --- JAX (any backend) -------------------------------------------------------------------------------
def jax_module():
    """jax, or None where it is not installed. It must not take most of the GPU's memory up front (torch
    shares the device)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
    except ImportError:
        return None
    return jax


def jax_peer(jax, case: Case, dtypes: list):
    """case.math under jax.jit: floats computed in float32, outputs cast to braze's dtypes. For dropout,
    the mask is given (the check) or drawn by jax.random (timing)."""
    jnp = jax.numpy

    def run(*args, keep=None, key=None):
        floats = [a.astype(jnp.float32) if hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating) else a
                  for a in args]
        extra = {}
        if case.dropout:
            extra["keep"] = keep if keep is not None else jax.random.uniform(key, args[0].shape) >= DROPOUT_P
        return [o.astype(d) for o, d in zip(case.math(jnp, *floats, **extra), dtypes)]
    return jax.jit(run)


def jax_inputs(jax, inputs: list) -> list:
    def put(a):
        if not isinstance(a, np.ndarray):
            return a
        return jax.device_put(a.astype(np.int32) if a.dtype == np.int64 else a)  # x64 is off by default
    return [put(a) for a in inputs]


def jax_ms(jax, fn, sets: list[list], kwargs: dict, repeats: int = 15, batch: int = 10) -> float:
    """Median wall time of one call, in ms, over batches of `batch` calls ended by one wait: JAX runs
    on streams of its own, and the batch hides its dispatch behind the device's work."""
    jax.block_until_ready(fn(*sets[0], **kwargs))
    cycle = itertools.cycle(sets)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batch):
            out = fn(*next(cycle), **kwargs)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - start) * 1e3 / batch)
    return statistics.median(samples)


def run_jax(jax, p: Prepared, sets_of_numpy: list[list]) -> dict:
    """The JAX peer's cell of the table: checked, then timed over `sets_of_numpy` put on the device."""
    try:
        fn = jax_peer(jax, p.case, p.dtypes)
        sets = [jax_inputs(jax, s) for s in sets_of_numpy]
        check_kwargs = {"keep": jax.device_put(p.keep)} if p.case.dropout else {}
        time_kwargs = {"key": jax.random.key(0)} if p.case.dropout else {}
    except Exception as e:  # noqa: BLE001  (out of memory, say: a cell of the table, not the end)
        return failed(e)
    return measure(lambda: [host(o) for o in fn(*sets[0], **check_kwargs)],
                   lambda: jax_ms(jax, fn, sets, time_kwargs), p.want, p.nbytes)
