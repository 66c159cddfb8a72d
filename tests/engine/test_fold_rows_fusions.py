"""A residual add (or dropout + residual) under a norm, returned and normalized in one task
(braze/passes/fold_rows.py), on the CPU backend against NumPy in float64: h and y, shapes down to one
column, odd widths, rank 3, empty, non-contiguous inputs; and generated programs of a row-wise
producer and its readers against the reference backend, on the CPU and planned for a GPU (whose
CUDA NVRTC compiles)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nvrtc_batches import compile_sources
from residual_norms import EPS, NORM_IDS, NORMS, NUMPY, SEED, P, build, reference

import braze as bz
from braze import config, engine
from braze.compile import nvrtc

TOLERANCE = {bz.float32: 1e-5, bz.bfloat16: 2e-2, bz.float16: 2e-3, bz.float64: 1e-12}


def inputs(shape, dtype, layout: str, rng) -> list[np.ndarray]:
    """x and the residual (`layout`: contiguous, x column-major, or a residual sliced from a wider
    array: rows not 16-byte aligned), weight and bias."""
    np_dtype = NUMPY[dtype]
    x, r = (rng.standard_normal(shape).astype(np_dtype) for _ in range(2))
    if layout == "transposed":
        x = np.asfortranarray(x)
    elif layout == "sliced":
        wide = rng.standard_normal((*shape[:-1], shape[-1] + 1)).astype(np_dtype)
        r = wide[..., 1:]
    w, b = (rng.standard_normal(shape[-1:]).astype(np_dtype) for _ in range(2))
    return [x, r, w, b]


def close(got, want, dtype) -> None:
    tolerance = TOLERANCE[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("norm, dropout", NORMS, ids=NORM_IDS)
@pytest.mark.parametrize("shape, layout", [((5, 1), "contiguous"), ((3, 7), "transposed"), ((33, 130), "sliced"),
                                           ((4, 4096), "contiguous"), ((2, 3, 17), "sliced"), ((0, 8), "contiguous")],
                         ids=str)
def test_h_and_y_in_one_task_match_numpy(norm, dropout, dtype, shape, layout):
    f = build(norm, dtype, len(shape), dropout)
    arrays = inputs(shape, dtype, layout, np.random.default_rng(len(shape) * 100 + shape[-1]))
    with bz.record() as rec, config.scope(enable="poison_outputs"):
        y, h = f.execute(arrays, backend="llvm")
    # A transposed x makes h a tile task of its own (braze/lower/tiles.py), read back by the norm.
    assert len(rec.launches) == (2 if layout == "transposed" else 1)
    want_y, want_h = reference(norm, dtype, dropout, *(a.astype(np.float64) for a in arrays))
    close(h, want_h, dtype)
    close(y, want_y, dtype)


# --- generated programs ----------------------------------------------------------------------------
PRODUCERS = {
    "add": lambda x, r, w: x + r,
    "scaled": lambda x, r, w: x * w + r * 0.5,
    "dropout": lambda x, r, w: bz.ops.where(bz.ops.rand(x.shape, seed=SEED) >= P, x * (1 / (1 - P)), 0.0) + r,
    "chain": lambda x, r, w: bz.ops.relu(x + r) - w,
}
CONSUMERS = {
    "rms_norm": lambda h, w: bz.ops.rms_norm(h, w, eps=EPS),
    "layer_norm": lambda h, w: bz.ops.layer_norm(h, w, w, eps=EPS),
    "softmax": lambda h, w: bz.ops.softmax(h, -1),
    "log_softmax": lambda h, w: bz.ops.log_softmax(h, -1),
    "sum": lambda h, w: bz.ops.sum(h, axes=[h.ndim - 1]),
    "max": lambda h, w: bz.ops.max(h, axes=[h.ndim - 1]),
    "pointwise": lambda h, w: bz.ops.tanh(h) * w,
}


@st.composite
def programs(draw):
    rank = draw(st.integers(2, 3))
    shape = (*draw(st.lists(st.sampled_from([1, 2, 3, 5]), min_size=rank - 1, max_size=rank - 1)),
             draw(st.sampled_from([1, 2, 3, 4, 7, 8, 33, 64, 130, 257])))
    return {"dtype": draw(st.sampled_from([bz.float32, bz.bfloat16, bz.float16, bz.float64])), "shape": shape,
            "producer": draw(st.sampled_from(sorted(PRODUCERS))),
            "consumers": draw(st.lists(st.sampled_from(sorted(CONSUMERS)), min_size=1, max_size=2, unique=True)),
            "h_first": draw(st.booleans()), "layout": draw(st.sampled_from(["contiguous", "transposed", "sliced"])),
            "seed": draw(st.integers(0, 2**16))}


def generated(program: dict) -> bz.Fusion:
    with bz.Fusion() as f:
        rank = len(program["shape"])
        x, r = (f.define_tensor([-1] * rank, dtype=program["dtype"]) for _ in range(2))
        w = f.define_tensor([-1], dtype=program["dtype"])
        h = PRODUCERS[program["producer"]](x, r, w)
        outputs = [CONSUMERS[name](h, w) for name in program["consumers"]]
        for out in [h, *outputs] if program["h_first"] else [*outputs, h]:
            f.add_output(out)
    return f


def run(f: bz.Fusion, arrays: list, backend: str) -> list[np.ndarray]:
    with config.scope(enable="poison_outputs"):
        if backend == "gpu_plan":  # the Kernel IR planned for a GPU, compiled for the CPU
            key = engine.signature(f, engine.bind_inputs(f, arrays))
            lowered = engine.lower_fusion(f, key, device_index=0)
            return engine.compile_fusion(f, key, lowered).run(engine.bind_inputs(f, arrays))
        return f.execute(arrays, backend="llvm")


cuda_bodies: list[str] = []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def _folded_programs_match_the_reference(program):
    dtype = program["dtype"]
    arrays = inputs(program["shape"], dtype, program["layout"], np.random.default_rng(program["seed"]))[:3]
    f = generated(program)
    want = f.execute(arrays, backend="reference")
    scale = {bz.float32: 1e-4, bz.bfloat16: 6e-2, bz.float16: 1e-2, bz.float64: 1e-9}[dtype]
    for backend in ("llvm", "gpu_plan"):
        with bz.record() as rec:
            got = run(f, arrays, backend)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=scale, atol=scale,
                                       err_msg=f"{program} on {backend}")
        # Rows of h's shape: h is made where they are (a transposed x tiles h in a task of its own).
        if not {"sum", "max"} & set(program["consumers"]) and program["layout"] != "transposed":
            assert len(rec.launches) <= len(program["consumers"]), f"{program} on {backend}"
    source = engine.cuda_source(f, arrays)
    cuda_bodies.append(source.body.replace("fusion_t", f"fusion{len(cuda_bodies)}_t"))


def test_generated_row_producers_and_their_readers_match_the_reference():
    cuda_bodies.clear()
    _folded_programs_match_the_reference()
    if nvrtc.available():
        compile_sources(cuda_bodies)
