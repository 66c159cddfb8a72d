"""More architectures (tests/torch_backend/more_models.py) through `torch.compile(backend="braze")` on CPU
tensors against eager PyTorch: every output and the gradient of every parameter, at static sizes and
under dynamic=True. Every region braze takes must build (fallback="error"); what it has no rule for
(complex numbers, erfinv, gathers by index tensors) stays in PyTorch between its regions. The same
models on CUDA tensors: tests/cuda/test_torch_backend_gpu.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from more_models import DATA_DEPENDENT, MODELS, STRICT, check_against_eager  # noqa: E402  (beside this file)

import braze as bz  # noqa: E402


@pytest.mark.parametrize("name", MODELS)
def test_a_model_matches_eager_forward_and_backward(name: str) -> None:
    check_against_eager(name, dynamic=None)


@pytest.mark.parametrize("name", ["t5_layer", "mixture_of_experts", "state_space_scan", "losses"])
def test_a_model_matches_eager_under_symbolic_sizes(name: str) -> None:
    check_against_eager(name, dynamic=True)


def test_the_models_run_in_braze_regions() -> None:
    """Each model fuses something: its norms, activations, softmaxes, scans or losses run in braze."""
    for name, (make_model, make_inputs) in MODELS.items():
        torch.manual_seed(0)
        with torch._dynamo.config.patch(DATA_DEPENDENT):
            explanation = bz.torch.explain(make_model(), *make_inputs(torch.Generator().manual_seed(1)),
                                           options=STRICT)
        assert explanation.regions and all(r.runs_in == "braze" for r in explanation.regions), (name, explanation)


def test_a_frame_dynamo_skips_runs_eagerly_and_explain_says_so() -> None:
    make_model, make_inputs = MODELS["mixture_of_experts"]
    explanation = bz.torch.explain(make_model(), *make_inputs(torch.Generator().manual_seed(1)))
    assert explanation.graphs == [] and "no graph reached the braze backend" in str(explanation)


class _GRUEncoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = torch.nn.GRU(4, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.enc(x)[1].tanh()


def test_explain_names_the_recurrent_modules_dynamo_leaves_untraced() -> None:
    """Dynamo skips a frame that calls nn.GRU (torch._dynamo.explain gives no reason): explain said only
    that nothing reached braze, and pointed at data-dependent loops."""
    x = torch.randn(2, 3, 4)
    explanation = bz.torch.explain(_GRUEncoder(), x)
    assert explanation.graphs == [] and explanation.untraced_rnns == ("enc (GRU)",)
    assert "enc (GRU)" in str(explanation) and "torch._dynamo.config.allow_rnn = True" in str(explanation)
    torch._dynamo.reset()  # Dynamo remembers the frame it skipped
    with torch._dynamo.config.patch(allow_rnn=True):
        explanation = bz.torch.explain(_GRUEncoder(), x, backward=False)
    assert explanation.regions and explanation.untraced_rnns == () and "allow_rnn" not in str(explanation)
