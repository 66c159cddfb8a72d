"""Full reductions over arrays dense in memory (braze/codegen/cuda_grid.py, walk_dense) on a GPU:
extents 0, 1, odd and many blocks' worth, dense, strided and one element into their buffer (those
two take the element walk), float32, bfloat16, float16, float64 and int32, one and two operands; a
float32 sum of 16M elements within 1e-6 of float64; the suite's full sum and gradient norm at their
GPU shapes, the same bits from run to run; and a misaligned view giving the element walk's bits.
Torch CUDA tensors in, outputs poisoned (0xFF bytes) before the kernel writes, results against NumPy
in float64."""

from __future__ import annotations

import numpy as np
import pytest
from dense_reduction_fusions import REDUCTIONS, check, fusion, operands

import braze as bz
from braze import config
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import build_fusion
from braze.compile import cuda_driver

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

TORCH = {bz.float32: torch.float32, bz.bfloat16: torch.bfloat16, bz.float16: torch.float16,
         bz.float64: torch.float64, bz.int32: torch.int32}
DTYPES = {  # the dtypes each reduction runs in
    "sum": [bz.float32, bz.bfloat16, bz.float64, bz.int32],  # (a float16 sum of 2^20 values near 1 is inf)
    "mean": [bz.float32, bz.bfloat16],
    "max": [bz.float32, bz.bfloat16, bz.float64],
    "min": [bz.float32, bz.float16],
    "norm": [bz.float32, bz.float64],
    "dot": [bz.float32, bz.bfloat16],
    "sum_as_float32": [bz.bfloat16, bz.float16],
}
# (shape, buffer or offset): whole arrays, a view one element into its buffer (every 16-byte load
# misaligned), rows apart (not one run), and 2-D and 3-D arrays with odd rows (one run all the same).
LAYOUTS = [((0,), 0), ((1,), 0), ((7,), 0), (((1 << 20) + 3,), 0), (((1 << 20) + 3,), 1), ((37, 129), 0),
           ((37, 129), (37, 132)), ((3, 5, 67), 0), ((1000, 1001), 0)]


def on_gpu(dtype: bz.DType):
    """Places a NumPy buffer on the GPU in `dtype` (through float32 where torch has no NumPy twin)."""
    def place(array: np.ndarray) -> torch.Tensor:
        if dtype is bz.bfloat16:
            return torch.from_numpy(array.astype(np.float32)).to("cuda").to(torch.bfloat16)
        return torch.from_numpy(array).to("cuda")
    return place


def host(t: torch.Tensor) -> np.ndarray:
    return t.double().cpu().numpy() if t.dtype.is_floating_point else t.cpu().numpy()


def run(name: str, dtype: bz.DType, tensors: list) -> torch.Tensor:
    with config.scope(enable="poison_outputs"):
        (out,) = fusion(REDUCTIONS[name], dtype, tensors[0].dim()).execute(tensors)
    torch.cuda.synchronize()
    return out


CASES_RUN = [(name, dtype, shape, layout) for name, dtypes in DTYPES.items() for dtype in dtypes
             for shape, layout in LAYOUTS if REDUCTIONS[name].empty or shape != (0,)]


@pytest.mark.parametrize("name, dtype, shape, layout", CASES_RUN,
                         ids=[f"{n}-{d.name}-{'x'.join(map(str, s))}-{lay}" for n, d, s, lay in CASES_RUN])
def test_full_reductions_against_float64(name, dtype, shape, layout):
    buffer, offset = (layout, 0) if isinstance(layout, tuple) else (None, layout)
    tensors = operands(REDUCTIONS[name], dtype, shape, buffer=buffer, offset=offset, place=on_gpu(dtype))
    if offset and tensors[0].numel():
        assert tensors[0].data_ptr() % 16 != 0
    out = run(name, dtype, tensors)
    assert tuple(out.shape) == ()
    check(REDUCTIONS[name], dtype, host(out), [host(t) for t in tensors])


@pytest.mark.parametrize("values", ["tenths", "normals"])
def test_a_float32_sum_of_16m_elements_is_within_1e6_of_float64(values):
    n = 1 << 24
    data = np.full(n, 0.1, np.float32) if values == "tenths" else \
        (np.random.default_rng(1).standard_normal(n) + 1.0).astype(np.float32)
    out = run("sum", bz.float32, [torch.from_numpy(data).to("cuda")])
    expected = data.astype(np.float64).sum()
    assert abs(float(out) - expected) <= 1e-6 * abs(expected)


@pytest.mark.parametrize("name", ["full_sum", "grad_norm"])
def test_the_suites_full_reductions_give_the_same_bits_every_run(name):
    case = next(c for c in CASES if c.name == name)
    shape = case.shape("gpu")
    arrays = case.inputs(np.random.default_rng(0), shape, np.float32)
    tensors = [torch.from_numpy(a).to("cuda") for a in arrays]
    f = build_fusion(case, shape)
    results = []
    for _ in range(3):
        with config.scope(enable="poison_outputs"):
            (out,) = f.execute(tensors)
        torch.cuda.synchronize()
        results.append(out.cpu().numpy().tobytes())
    assert results[1] == results[0] and results[2] == results[0]
    (expected,) = case.math(np, *[a.astype(np.float64) for a in arrays])
    value = np.frombuffer(results[0], np.float32)[0]
    assert abs(value - expected) <= 1e-6 * abs(expected)


def test_a_misaligned_view_takes_the_element_walk():
    # x[1:] of a flat buffer: every 16-byte load would be misaligned, so the kernel walks elements,
    # in the same order (the same blocks: 2^20 elements take fewer than an H100 holds) as with the
    # dense path turned off: the same bits.
    buffer = torch.from_numpy((np.random.default_rng(2).standard_normal((1 << 20) + 1) + 1).astype(np.float32))
    x = buffer.to("cuda")[1:]
    dense = run("sum", bz.float32, [x])
    with config.scope(disable="dense_reductions"):
        plain = run("sum", bz.float32, [x])
    assert dense.cpu().numpy().tobytes() == plain.cpu().numpy().tobytes()
    check(REDUCTIONS["sum"], bz.float32, host(dense), [host(x)])
