"""Which nodes of an ATen graph braze takes, and why it leaves the others to PyTorch.

`BrazeSupport` (an FX `OperatorSupport`, asked by partition.py) says yes to a node when its op has a
rule (`rules.RULES`) that accepts it, every tensor it reads and makes has a braze dtype and lives
on the graph's device, and the options do not exclude it. `why_not` gives the reason for a no, which
`explain` shows.
"""

from __future__ import annotations

import operator

import torch
from torch import fx
from torch.fx.passes.operator_support import OperatorSupportBase

from braze.frontend.torch.options import Options
from braze.frontend.torch.region_builder import TORCH_DTYPES, meta, op_name
from braze.frontend.torch.rng import RANDOM_OPS, draw_seed, is_seed_argument
from braze.frontend.torch.table import RULES

aten = torch.ops.aten

# Ops braze does not fuse, by family: the reason explain gives.
_TORCH_FAMILIES: list[tuple[tuple[str, ...], str]] = [
    (("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "dot", "addmv", "mv"),
     "a matrix multiply: PyTorch's BLAS runs it"),
    (("convolution", "convolution_backward", "_convolution"), "a convolution: PyTorch runs it"),
    (("_scaled_dot_product", "_flash_attention", "_efficient_attention"), "attention: PyTorch's kernel runs it"),
    (("embedding", "_embedding_bag", "index", "gather", "scatter", "index_put", "index_select", "take",
      "_unsafe_index", "nll_loss", "masked_scatter", "scatter_add"),
     "indexing by a tensor (gather/scatter): braze has none"),
    (("empty", "empty_strided", "empty_like", "new_empty"), "an allocation with no values: nothing to fuse"),
    (("_cdist_forward", "_cdist_backward", "cdist", "_pdist_forward", "_pdist_backward", "pdist", "_euclidean_dist"),
     "pairwise distances (cdist, pdist): PyTorch runs them, as it does matrix multiplies"),
    (("triu_indices", "tril_indices"), "a triangle's indices (triu_indices, tril_indices): braze has none"),
    (("_assert_", "_functional_assert_"),  # _assert_async, _assert_scalar, _assert_tensor_metadata
     "a check of values at run time (an assert): PyTorch runs it, there is nothing to fuse"),
    # braze draws bernoulli masks (rng.bernoulli_decompositions) but for these.
    (("bernoulli",), "a bernoulli draw from a torch.Generator of the user's or of a probability out of [0, 1]: "
                     "PyTorch draws it"),
    (("native_dropout", "randint", "random", "uniform", "normal", "randperm", "multinomial",
      "exponential", "geometric", "cauchy", "log_normal", "poisson", "binomial", "_standard_gamma",
      "_sample_dirichlet"), "a random op braze has no rule for"),
    (("max_pool", "avg_pool", "adaptive_max_pool", "adaptive_avg_pool", "_adaptive_avg_pool", "fractional_max_pool",
      "lp_pool"), "a pooling window: PyTorch runs it"),
    (("sort", "topk", "kthvalue", "median", "nanmedian", "mode", "argsort", "msort", "unique"),
     "sorting and selection: braze has none"),
    (("as_strided",), "explicit strides (as_strided): PyTorch runs it"),
    (("sym_size", "sym_stride", "sym_numel", "sym_storage_offset"),
     "a size query: PyTorch answers it, there is nothing to compute"),
]

# Views: in PyTorch they move no data. A region's last ops are left to PyTorch when they are views,
# so PyTorch makes the strided views its later kernels expect (some, like attention's backward,
# assume the strides they were traced with), and braze writes dense tensors only.
VIEW_OPS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default, aten.t.default,
    aten.transpose.int, aten.expand.default, aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.squeeze.default, aten.slice.Tensor, aten.select.int, aten.alias.default, aten.detach.default,
})
# Ops that compute nothing: a region of these (and views) alone is not worth a kernel.
NON_COMPUTE_OPS = VIEW_OPS | {aten.clone.default, aten.lift_fresh_copy.default}


def why_not(node: fx.Node, options: Options, device: torch.device | None) -> str | None:
    """None when braze can fuse `node`; else why it stays in PyTorch."""
    target = node.target
    if target is operator.getitem:
        return "takes one output of a multi-output PyTorch op"
    if target is draw_seed:
        return "draws the seed of braze's random numbers from torch's generator"
    if target in RANDOM_OPS:  # the ones braze draws were keyed (rng.py) before partitioning
        return _random_reason(node, options, device)
    if target not in RULES:
        return _family_reason(target)
    if _excluded(target, options):
        return "excluded by options['exclude_ops']"
    tensor_reason = _tensor_reason(node, device)
    if tensor_reason is not None:
        return tensor_reason
    accepts = RULES[target].accepts
    reason = accepts(node) if accepts is not None else None
    return f"braze's rule does not take {reason}" if reason else None


def _family_reason(target: object) -> str:
    name = op_name(target)
    short = name.split(".")[1] if name.startswith("aten.") else name
    for prefixes, reason in _TORCH_FAMILIES:
        if any(short.startswith(p) for p in prefixes):
            return reason
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"a higher-order op ({name}: control flow or a wrapped subgraph): it runs in PyTorch, its subgraphs too"
    if not isinstance(target, torch._ops.OpOverload):
        return "a Python call on sizes or values, not an ATen op"
    return "braze has no rule for this op"


def _excluded(target: object, options: Options) -> bool:
    name = op_name(target)
    return name in options.exclude_ops or name.rsplit(".", 1)[0] in options.exclude_ops


def _random_reason(node: fx.Node, options: Options, device: torch.device | None) -> str:
    if options.random == "torch":
        return "a random op: options['random'] is 'torch'"
    if _excluded(node.target, options):
        return "excluded by options['exclude_ops']"
    return f"a random op braze does not draw: {_tensor_reason(node, device) or 'not a float tensor'}"


def takes_random_node(node: fx.Node, options: Options, device: torch.device | None) -> bool:
    """Whether braze draws this random node's numbers (`rng.key_random_ops`): a float tensor on the
    graph's device, with `options['random']` 'braze' and the op not excluded."""
    return (options.random == "braze" and not _excluded(node.target, options)
            and _tensor_reason(node, device) is None and meta(node).dtype.is_floating_point)


def _tensors(node: fx.Node) -> list[torch.Tensor]:
    # A random op's seed is a CPU tensor read as a number, whatever the graph's device.
    values = [meta(node)] + [meta(a) for a in node.all_input_nodes if not is_seed_argument(node, a)]
    flat = []
    for v in values:
        flat.extend(v if isinstance(v, (list, tuple)) else [v])
    return [v for v in flat if isinstance(v, torch.Tensor)]


def _tensor_reason(node: fx.Node, device: torch.device | None) -> str | None:
    if not isinstance(meta(node), torch.Tensor):
        return "its result is not one tensor"
    for t in _tensors(node):
        if t.dtype not in TORCH_DTYPES:
            return f"dtype {t.dtype} has no braze dtype"
        if device is not None and t.device != device:
            return f"a tensor on {t.device}, not the graph's {device}"
        if t.device.type not in ("cpu", "cuda"):
            return f"a tensor on {t.device}: braze runs on CPUs and NVIDIA GPUs"
    return None


def graph_device(graph: fx.Graph) -> torch.device | None:
    """The device of the graph's tensors: the first non-CPU one, else the CPU."""
    devices = [meta(n).device for n in graph.nodes if isinstance(meta(n), torch.Tensor)]
    return next((d for d in devices if d.type != "cpu"), devices[0] if devices else None)


class BrazeSupport(OperatorSupportBase):
    """FX's operator-support hook: yes for the nodes braze fuses (see the module docstring)."""

    def __init__(self, options: Options, device: torch.device | None) -> None:
        self.options, self.device = options, device
        self.refused: dict[str, str] = {}  # node name -> why not (FX's fusion copies nodes; names stay)

    def is_node_supported(self, submodules: dict, node: fx.Node) -> bool:
        return self.takes(node)

    def takes(self, node: fx.Node) -> bool:
        """Whether braze fuses `node`; the reason for a no is kept in `refused`."""
        if node.op != "call_function":
            return False
        reason = why_not(node, self.options, self.device)
        if reason is not None:
            self.refused[node.name] = reason
        return reason is None
