"""`torch.compile(backend="braze")` on CUDA tensors: the model zoo forward and backward against the same
model in float64 on the CPU, static sizes then symbolic ones, with braze's outputs poisoned before its
kernels write them; dropout masks from the Philox stream of torch's seed in both passes; bf16 autocast.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from braze import config
from braze.compile import cuda_driver

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import braze as bz  # noqa: E402
from braze.frontend.torch import backend as braze_backend  # noqa: E402  (by function: braze may run uninstalled)
from braze.frontend.torch.rng import draw_seed, philox_random  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "torch_backend"))
import more_models  # noqa: E402
import torch_zoo  # noqa: E402

STRICT = {"fallback": "error"}


@pytest.fixture(autouse=True)
def exact_gpu_math():
    """Full float32 matmuls and convolutions (no TF32), a fresh Dynamo, poisoned braze outputs."""
    torch._dynamo.reset()
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    with config.scope(enable="poison_outputs"):
        yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    torch._dynamo.reset()


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """`actual` (on the GPU) against a float64 reference, relative to the reference's largest magnitude."""
    assert actual.device.type == "cuda", f"{what}: on {actual.device}"
    expected = expected.double()
    scale = max(expected.abs().max().item(), 1.0)
    torch.testing.assert_close(actual.detach().double().cpu(), expected, rtol=rtol, atol=atol * scale,
                               msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "resnet_block", "mlp"])
def test_a_model_on_the_gpu_matches_float64_forward_and_backward(name: str) -> None:
    torch.manual_seed(0)
    model, make_inputs = torch_zoo.ZOO[name]()
    reference = copy.deepcopy(model).double()
    model.cuda()
    compiled = torch.compile(model, backend=braze_backend, options=STRICT)
    generator = torch.Generator().manual_seed(1)
    for batch, seq in ((2, 5), (3, 7), (4, 9)):  # static sizes, then symbolic ones
        inputs = make_inputs(batch, seq, generator)
        leaf, leaf_ref = inputs[0].cuda().requires_grad_(), inputs[0].double().requires_grad_()
        with bz.record() as rec:
            out = compiled(leaf, *(t.cuda() for t in inputs[1:]))
        expected = reference(leaf_ref, *(t.double() for t in inputs[1:]))
        assert rec.launches, "the regions did not run in braze"
        _close(out, expected, f"output at {batch}x{seq}")
        grad_out = torch.randn(expected.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        grads = torch.autograd.grad(out, [leaf, *model.parameters()], grad_out.float().cuda())
        grads_ref = torch.autograd.grad(expected, [leaf_ref, *reference.parameters()], grad_out)
        names = ["input", *(n for n, _ in model.named_parameters())]
        for param, g, g_ref in zip(names, grads, grads_ref):
            _close(g, g_ref, f"gradient of {param} at {batch}x{seq}")
    for buffer, buffer_ref in zip(model.buffers(), reference.buffers()):  # batch norm's running statistics
        _close(buffer, buffer_ref, "a buffer")


def _dropout(x: torch.Tensor) -> torch.Tensor:
    return F.dropout(x * 2, 0.3, training=True) * 3


def _kept_after(torch_seed: int, shape: tuple, offset: int = 0) -> torch.Tensor:
    """The mask the backend's random op `offset` keeps after `torch.manual_seed(torch_seed)` (CPU)."""
    torch.manual_seed(torch_seed)
    uniform = philox_random(draw_seed(), offset, list(shape), torch.float32, torch.device("cpu"), False)
    return uniform > 0.3


@pytest.mark.parametrize("shape", [(64, 33), (3, 1000, 7)])
def test_dropout_on_the_gpu_keeps_the_philox_stream_of_torchs_seed_forward_and_backward(shape: tuple) -> None:
    x = torch.randn(shape, dtype=torch.float64)
    grad_out = torch.randn(shape, dtype=torch.float64)
    leaf = x.float().cuda().requires_grad_()
    saved = []
    compiled = torch.compile(_dropout, backend=braze_backend, options=STRICT)
    torch.manual_seed(11)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = compiled(leaf)
    (grad,) = torch.autograd.grad(out, leaf, grad_out.float().cuda())
    kept = _kept_after(11, shape)
    _close(out, x.float().double() * 2 * kept / 0.7 * 3, "output", rtol=1e-6, atol=1e-6)
    _close(grad, grad_out.float().double() * 2 * kept / 0.7 * 3, "gradient", rtol=1e-6, atol=1e-6)
    assert not [t for t in saved if t.dtype in (torch.bool, torch.uint8)], "a mask was saved for the backward"


def test_random_numbers_with_no_tensor_beside_them_stay_on_the_gpu() -> None:
    """A region of random ops alone reads only its seed (a CPU number): its outputs still live on the GPU."""
    w = torch.randn(8, 3, dtype=torch.float64)
    leaf = w.float().cuda().requires_grad_()

    def masked(w):
        return torch.mm((torch.rand(4, 8, device=w.device) > 0.3).float(), w)

    torch.manual_seed(5)
    out = torch.compile(masked, backend=braze_backend, options=STRICT)(leaf)
    (grad,) = torch.autograd.grad(out, leaf, torch.ones(4, 3, device="cuda"))
    kept = _kept_after(5, (4, 8)).double()
    _close(out, kept @ w.float().double(), "output")
    _close(grad, kept.t() @ torch.ones(4, 3, dtype=torch.float64), "gradient")


def test_a_gpt2_block_under_bf16_autocast_on_the_gpu() -> None:
    torch.manual_seed(0)
    model, make_inputs = torch_zoo.gpt2()
    reference = copy.deepcopy(model).double()
    model.cuda()
    (x,) = make_inputs(2, 16, torch.Generator().manual_seed(1))
    compiled = torch.compile(model, backend=braze_backend, options=STRICT)
    leaf = x.cuda().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = compiled(leaf)
    expected = reference(x.double())
    _close(out, expected, "output", rtol=3e-2, atol=3e-2)
    out.float().square().mean().backward()
    expected.square().mean().backward()
    for (param, p), p_ref in zip(model.named_parameters(), reference.parameters()):
        _close(p.grad, p_ref.grad, f"gradient of {param}", rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("name", more_models.MODELS)
def test_more_architectures_on_the_gpu_match_eager(name: str) -> None:
    """tests/torch_backend/more_models.py on CUDA tensors against eager PyTorch on the same GPU (float32,
    no TF32), static sizes and symbolic ones, braze's outputs poisoned before its kernels write them."""
    for dynamic in (None, True):
        torch._dynamo.reset()
        more_models.check_against_eager(name, dynamic, device="cuda", tolerance=(1e-4, 1e-4), backend=braze_backend)
