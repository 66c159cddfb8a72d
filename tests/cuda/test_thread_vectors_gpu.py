"""Tasks of one index a thread that move vectors (braze/codegen/cuda_rows.py, write_thread_vectors)
on a GPU: lengths around the vector width (none, fewer than one vector, whole vectors and a rest),
arrays aligned and starting one element into their buffer (every vector access would be misaligned:
the whole task goes one index a thread), in float32, bfloat16, float64, int32 and bool; and the
suite's Adam update at its GPU shape. Torch CUDA tensors in, outputs poisoned (0xFF bytes) before the
kernel writes, results against NumPy in float64."""

from __future__ import annotations

import numpy as np
import pytest
from thread_vector_fusions import elementwise, reference

import braze as bz
from braze import config
from braze.cli.bench.cases import CASES
from braze.cli.bench.check import build_fusion
from braze.compile import cuda_driver

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]

TORCH = {bz.float32: torch.float32, bz.bfloat16: torch.bfloat16, bz.float64: torch.float64, bz.int32: torch.int32,
         bz.bool_: torch.bool}
DTYPES = list(TORCH)
LENGTHS = [0, 1, 3, 4, 5, 1023, (1 << 20) + 7]


def tensor(dtype: bz.DType, n: int, offset: int, generator) -> torch.Tensor:
    """`n` elements starting `offset` elements into a GPU buffer."""
    if dtype is bz.bool_:
        full = torch.rand(n + offset, generator=generator) > 0.5
    elif dtype is bz.int32:
        full = torch.randint(-1000, 1000, (n + offset,), generator=generator, dtype=torch.int32)
    else:
        full = torch.randn(n + offset, generator=generator, dtype=torch.float64).to(TORCH[dtype])
    return full.to("cuda")[offset:]


def host(t: torch.Tensor) -> np.ndarray:
    return t.cpu().numpy() if t.dtype in (torch.bool, torch.int32) else t.double().cpu().numpy()


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "one_element_in"])
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_elementwise_tasks_move_vectors(dtype, n, offset):
    g = torch.Generator().manual_seed(n + offset)
    x, y, z = (tensor(dtype, n, offset, g) for _ in range(3))
    if offset and n:  # (an empty view has no address of its own to misalign)
        assert x.data_ptr() % 16 != 0
    scalar = [] if dtype is bz.bool_ else [3 if dtype is bz.int32 else 0.75]
    with config.scope(enable="poison_outputs"):
        outs = elementwise(dtype).execute([x, y, z, *scalar])
    torch.cuda.synchronize()
    expected = reference(dtype, host(x), host(y), host(z), *scalar)
    tolerance = {bz.bfloat16: 2e-2, bz.float32: 1e-6, bz.float64: 1e-12}.get(dtype, 0)
    for out, wanted in zip(outs, expected):
        assert tuple(out.shape) == (n,)
        actual = host(out)
        if tolerance:  # of the largest |value|, as the suite checks (braze/cli/bench/check.py)
            scale = max(np.abs(wanted).max(initial=0.0), 1.0)
            np.testing.assert_allclose(actual, wanted, rtol=tolerance, atol=tolerance * scale)
        else:
            np.testing.assert_array_equal(actual, wanted)


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "one_element_in"])
def test_the_adam_update_at_the_suites_shape(offset):
    case = next(c for c in CASES if c.name == "adam")
    shape = case.shape("gpu")
    arrays = case.inputs(np.random.default_rng(0), (shape[0] + offset,), np.float32)
    tensors = [torch.from_numpy(a).to("cuda")[offset:] for a in arrays[:4]]
    with config.scope(enable="poison_outputs"):
        outs = build_fusion(case, shape).execute(tensors + arrays[4:])
    torch.cuda.synchronize()
    expected = case.math(np, *[a[offset:].astype(np.float64) for a in arrays[:4]], *arrays[4:])
    for out, wanted in zip(outs, expected):
        actual = out.double().cpu().numpy()
        assert np.isfinite(actual).all()  # the poison (NaN) is gone everywhere
        np.testing.assert_allclose(actual, wanted, rtol=1e-5, atol=1e-5 * np.abs(wanted).max())


def laid_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    """`t`'s values laid out densely, an element into the buffer, transposed in memory, or in padded rows."""
    if layout == "offset":
        return torch.cat([t.flatten()[:1], t.flatten()])[1:].view(t.shape)
    if layout == "transposed":
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "padded":
        return torch.cat([t, t[..., :3]], -1)[..., :t.shape[-1]]
    return t


@pytest.mark.parametrize("shape", [(3, 5), (0, 4), (2, 3, 4, 5), (1, 1, 7), (37, 1029), (512, 2048), (8, 16, 4099)])
@pytest.mark.parametrize("layout", ["dense", "offset", "transposed", "padded"])
@pytest.mark.parametrize("dtype", [bz.float32, bz.bfloat16], ids=str)
def test_fusions_of_several_axes_flat_or_by_rows(dtype, layout, shape):
    """Dense arrays of several axes are one flat range of vectors (schedule/rows.py, flat_pointwise);
    an array off by an element takes the flat range one index a thread, a transposed or padded one
    keeps rows."""
    g = torch.Generator().manual_seed(sum(shape))
    x, y, z = (torch.randn(shape, generator=g, dtype=torch.float64).to(TORCH[dtype]).cuda() for _ in range(3))
    x, y, z = x, y, laid_out(z, layout)
    if layout == "offset":
        x, y = laid_out(x, layout), laid_out(y, layout)
    with config.scope(enable="poison_outputs"):
        outs = elementwise(dtype, len(shape)).execute([x, y, z, 0.75])
    torch.cuda.synchronize()
    tolerance = 2e-2 if dtype is bz.bfloat16 else 1e-6
    for out, wanted in zip(outs, reference(dtype, host(x), host(y), host(z), 0.75)):
        assert tuple(out.shape) == shape
        scale = max(np.abs(wanted).max(initial=0.0), 1.0)
        np.testing.assert_allclose(host(out), wanted, rtol=tolerance, atol=tolerance * scale)


@pytest.mark.parametrize("name", ["cast_bf16", "gelu_backward", "swiglu"])
def test_the_suites_flat_fusions_at_an_odd_shape(name):
    case = next(c for c in CASES if c.name == name)
    shape = (67, 1030)
    dtype = getattr(torch, case.dtype)
    tensors = [torch.from_numpy(a).to(dtype).cuda() for a in case.inputs(np.random.default_rng(0), shape, np.float32)]
    with config.scope(enable="poison_outputs"):
        (out,) = build_fusion(case, shape).execute(tensors)
    torch.cuda.synchronize()
    (wanted,) = case.math(np, *[t.double().cpu().numpy() for t in tensors])
    scale = max(np.abs(wanted).max(), 1.0)
    np.testing.assert_allclose(out.double().cpu().numpy(), wanted, rtol=2e-2, atol=2e-2 * scale)
