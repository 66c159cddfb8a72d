"""`braze.torch.explain(model, *inputs)`: what the braze backend made of a model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from braze.frontend.torch.backend import GraphReport, make_backend
from braze.frontend.torch.options import parse_options


@dataclass
class Explanation:
    """The graphs the backend compiled for one call (forward, backward or inference), each with its
    regions (the ATen ops each fused, where it ran, the kernels it launched) and the ops that stayed
    in PyTorch, with the reason, and the model's recurrent modules that TorchDynamo left untraced.
    `str()` gives a readable report."""

    graphs: list[GraphReport]
    untraced_rnns: tuple[str, ...] = ()  # "enc (GRU)": nn.RNN, nn.LSTM and nn.GRU Dynamo did not trace

    @property
    def regions(self) -> list:
        return [r for g in self.graphs for r in g.regions]

    def __str__(self) -> str:
        rnns = []
        if self.untraced_rnns:  # torch._dynamo.explain gives no reason for these
            rnns = [f"not traced: {', '.join(self.untraced_rnns)}: TorchDynamo leaves nn.RNN, nn.LSTM and nn.GRU "
                    "to eager PyTorch unless torch._dynamo.config.allow_rnn = True"]
        if not self.graphs:  # Dynamo skipped the frame (a graph break in a loop, say): it ran as plain Python
            return "\n".join([
                "no graph reached the braze backend: TorchDynamo ran this call as plain Python "
                "(torch._dynamo.explain(model)(*inputs) says why; a loop over data-dependent indices "
                "needs torch._dynamo.config.capture_dynamic_output_shape_ops = True)", *rnns])
        lines = rnns
        for g in self.graphs:
            lines.append(f"{g.graph} graph: {len(g.regions)} braze region(s), "
                         f"{sum(g.torch_ops.values())} op(s) in PyTorch")
            for r in g.regions:
                ops = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in sorted(r.fused_ops.items()))
                where = "braze" if r.runs_in == "braze" else f"PyTorch ({r.reason})"
                lines.append(f"  region {r.name}: runs in {where}; fuses {sum(r.fused_ops.values())} ops: {ops}")
                if r.kernels:
                    lines.append(f"    kernels launched: {', '.join(r.kernels)}")
            for (op, reason), n in sorted(g.torch_ops.items()):
                lines.append(f"  in PyTorch: {op}{f' x{n}' if n > 1 else ''}: {reason}")
        return "\n".join(lines)


def explain(model: torch.nn.Module | object, *inputs: object, backward: bool | None = None,
            options: Mapping[str, object] | None = None, **kwargs: object) -> Explanation:
    """Compiles `model` with the braze backend, runs it once on `inputs` (and a backward pass of the
    sum of its outputs when `backward` is True, or None and an output needs a gradient), and reports
    the regions: which ATen ops each fused, which ops stayed in PyTorch and why, and the kernels each
    region launched. Gradients the backward pass adds to parameters and inputs are taken back off.
    `options` are the backend's, as `torch.compile(model, backend="braze", options=...)` takes them
    (`{"exclude_ops": ["aten.gelu"]}`); keyword arguments go to the model."""
    reports: list[GraphReport] = []
    compiled = torch.compile(model, backend=make_backend(parse_options(options), reports, record_launches=True))
    saved = _saved_grads(model, inputs)
    outputs = compiled(*inputs, **kwargs)
    flat = [t for t in torch.utils._pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]
    needs_grad = [t for t in flat if t.requires_grad]
    if needs_grad and backward is not False:
        try:
            torch.autograd.backward([t.float().sum() for t in needs_grad])
        except RuntimeError:
            if backward:  # asked for: the caller should hear why there is none
                raise
            # Not asked for: the model ran its own backward already (a training step), and freed the graph.
    _restore_grads(saved)
    return Explanation(reports, _untraced_rnns(model))


def _untraced_rnns(model: object) -> tuple[str, ...]:
    """The model's recurrent modules that Dynamo runs eagerly: all of them while `allow_rnn` is off
    (a call through one breaks the graph, or skips the whole frame when nothing else is left)."""
    if not isinstance(model, torch.nn.Module) or torch._dynamo.config.allow_rnn:
        return ()
    return tuple(f"{name or 'the model'} ({type(m).__name__})" for name, m in model.named_modules()
                 if isinstance(m, torch.nn.RNNBase))


def _saved_grads(model: object, inputs: tuple) -> list:
    """The gradients a backward pass would add to: the model's parameters' and the leaf inputs'."""
    leaves = list(model.parameters()) if isinstance(model, torch.nn.Module) else []
    leaves += [t for t in torch.utils._pytree.tree_leaves(inputs)
               if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad]
    return [(t, None if t.grad is None else t.grad.clone()) for t in leaves]


def _restore_grads(saved: list) -> None:
    for leaf, grad in saved:
        leaf.grad = grad
