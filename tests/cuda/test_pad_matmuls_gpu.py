"""`torch.compile(backend="braze")` pads a tied output projection with an odd vocabulary on the GPU
(braze/frontend/torch/pad_matmuls.py), with the default options: under bf16 autocast the loss and every
parameter's gradient match the model in float64 on the CPU, braze's outputs poisoned before its
kernels write them, and none of the head's three matrix multiplies runs on an unaligned leading
dimension (the cuBLAS `align1` kernels), unless `BRAZE_DISABLE=pad_mm`.

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

from braze.frontend.torch import backend as braze_backend  # noqa: E402  (by function: braze may run uninstalled)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "torch_backend"))
import torch_zoo  # noqa: E402

# Large enough for padding to pay (pad_matmuls.pays_to_pad): 512 tokens x 256 x 2051 classes.
VOCAB, DIM, BATCH, SEQ = 2051, 256, 2, 256


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float, atol: float) -> None:
    expected = expected.double()
    scale = max(expected.abs().max().item(), 1.0)
    torch.testing.assert_close(actual.detach().double().cpu(), expected, rtol=rtol, atol=atol * scale,
                               msg=lambda m: f"{what}: {m}")


def _train_once(disable: str = "") -> tuple[torch.nn.Module, torch.Tensor, list]:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch_zoo.TiedLM(vocab=VOCAB, dim=DIM)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    reference = copy.deepcopy(model).double()
    gpu_model = model.cuda()
    compiled = torch.compile(gpu_model, backend=braze_backend, options={"fallback": "error"})
    knobs = {"enable": "poison_outputs", **({"disable": disable} if disable else {})}
    with config.scope(**knobs), torch_zoo.recording_matmuls() as calls:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(tokens.cuda())
        loss.backward()
        torch.cuda.synchronize()
    expected = reference(tokens)
    expected.backward()
    _close(loss, expected, "loss", rtol=2e-2, atol=2e-2)
    for (name, p), p_ref in zip(gpu_model.named_parameters(), reference.parameters()):
        _close(p.grad, p_ref.grad, f"gradient of {name}", rtol=5e-2, atol=5e-2)
    return gpu_model, loss, [c for c in calls if c.touches(VOCAB) or c.touches(VOCAB + 5)]


def test_a_tied_lm_with_an_odd_vocabulary_runs_its_head_aligned_and_matches_float64() -> None:
    _, _, head = _train_once()
    assert len(head) == 3, head  # logits, and the gradients of the hidden state and of the weight
    assert all(call.aligned() for call in head), head


def test_without_padding_the_head_runs_unaligned_and_still_matches() -> None:
    _, _, head = _train_once(disable="pad_mm")
    assert len(head) == 3 and not any(call.aligned() for call in head), head
