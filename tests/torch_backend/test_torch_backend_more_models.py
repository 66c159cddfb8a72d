"""More architectures (tests/torch_backend/more_models.py) through `torch.compile(backend="braze")` on CPU
tensors against eager PyTorch: every output and the gradient of every parameter, at static sizes and
under dynamic=True. Every region braze takes must build (fallback="error"); what it has no rule for
(complex numbers, erfinv, gathers by index tensors) stays in PyTorch between its regions. The same
models on CUDA tensors: tests/cuda/test_torch_backend_gpu.py."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from more_models import MODELS  # noqa: E402  (tests/torch_backend, beside this file)

import braze as bz  # noqa: E402

STRICT = {"fallback": "error"}
# The mixture of experts loops over torch.where's indices: without this Dynamo skips the frame (a graph
# break in a loop), and the model runs eagerly. With it, the expert batches are unbacked sizes.
DATA_DEPENDENT = {"capture_dynamic_output_shape_ops": True}


def outputs_and_gradients(model, inputs: tuple) -> tuple[list, list]:
    """The model's outputs and the gradients of its parameters of a weighted sum of them (each output
    its own weight, so a gradient mixed up between outputs shows)."""
    out = model(*inputs)
    outs = list(out) if isinstance(out, tuple) else [out]
    total = sum(o.float().sum() * (i + 1) for i, o in enumerate(outs))
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(total, params, allow_unused=True)
    return [o.detach() for o in outs], list(grads)


def check_against_eager(name: str, dynamic: bool | None, device: str = "cpu",
                        tolerance: tuple[float, float] = (1e-4, 1e-4)) -> None:
    make_model, make_inputs = MODELS[name]
    torch.manual_seed(0)
    model = make_model().to(device)
    reference = copy.deepcopy(model)
    inputs = tuple(t.to(device) for t in make_inputs(torch.Generator().manual_seed(1)))
    compiled = torch.compile(model, backend="braze", options=STRICT, dynamic=dynamic)
    with torch._dynamo.config.patch(DATA_DEPENDENT):
        outs, grads = outputs_and_gradients(compiled, inputs)
    outs_ref, grads_ref = outputs_and_gradients(reference, inputs)
    rtol, atol = tolerance
    for n, (actual, expected) in enumerate(zip(outs, outs_ref, strict=True)):
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=lambda m, n=n: f"output {n}: {m}")
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    for param, actual, expected in zip(names, grads, grads_ref, strict=True):
        assert (actual is None) == (expected is None), param
        if expected is not None:
            torch.testing.assert_close(actual, expected, rtol=rtol * 10, atol=atol,
                                       msg=lambda m, param=param: f"gradient of {param}: {m}")


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
