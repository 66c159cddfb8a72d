"""The `torch.compile` backend: Dynamo's graph -> AOTAutograd's forward and backward ATen graphs ->
regions braze fuses, with PyTorch calls between them.

AOTAutograd (through Dynamo's `aot_autograd` helper) traces the forward and the backward with
PyTorch's core ATen decompositions plus the ones in `EXTRA_DECOMPOSITIONS`, which break norms,
softmax and dropout into the pointwise ops and reductions braze fuses, `foreach.py`'s, which break
`torch._foreach_*` ops into the op on each tensor, `rng.py`'s of bernoulli's masks, and
`decompositions.py`'s of ops PyTorch keeps whole (weight norm's backward). Matrix
multiplies whose extents break 16-byte alignment are padded (`pad_matmuls.py`), the pads fused into
their producers' regions.
Random numbers are keyed by a seed from torch's generator, and dropout masks drawn again in the
backward instead of saved (`rng.py`), before PyTorch's min-cut partition (or AOTAutograd's default
one: `Options.partition`) splits the joint graph.
FX's capability-based partitioning (its proposal step in `partition.py`, linear where FX's is
quadratic) then cuts each graph into the largest regions whose nodes `support.why_not` accepts; each
region becomes one braze fusion (`region_builder.py`) called by a `BrazeRegion` module, and regions
alike but for their nodes' names (`region_key.py`: a model's layers) share one.
"""

from __future__ import annotations

import itertools
import operator
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import fx
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch import config as functorch_config
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition
from torch.fx.passes.infra.partitioner import Partition
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from braze import config
from braze.errors import Error
from braze.frontend.torch.ahead import compile_regions_ahead
from braze.frontend.torch.carriers import Carrier, add_carriers, add_device_anchor, missing_symbols
from braze.frontend.torch.decompositions import braze_decompositions
from braze.frontend.torch.foreach import foreach_decompositions
from braze.frontend.torch.options import Options, parse_options
from braze.frontend.torch.pad_matmuls import pad_matmuls
from braze.frontend.torch.partition import propose_partitions
from braze.frontend.torch.region import BrazeRegion, RegionReport
from braze.frontend.torch.region_builder import BuiltRegion, RegionBuilder, is_seed_input, op_name
from braze.frontend.torch.region_key import region_key
from braze.frontend.torch.rng import bernoulli_decompositions, key_random_ops, replay_in_backward
from braze.frontend.torch.support import NON_COMPUTE_OPS, VIEW_OPS, BrazeSupport, graph_device, takes_random_node
from braze.frontend.torch.table import RULES

aten = torch.ops.aten

# Composite ops that core ATen keeps whole, broken into what braze fuses.
EXTRA_DECOMPOSITIONS = [
    aten.native_layer_norm, aten._softmax, aten._log_softmax, aten._native_batch_norm_legit_functional,
    aten._native_batch_norm_legit_no_training, aten._native_batch_norm_legit, aten.native_batch_norm,
    aten.native_group_norm, aten.native_dropout, aten.split_with_sizes, aten.var_mean, aten.hardtanh,
    aten.leaky_relu, aten.elu, aten.addcmul, aten.addcdiv, aten.lerp, aten.hardsigmoid, aten.hardswish,
    aten.softplus, aten.mish, aten.logsumexp, aten.std, aten.std_mean, aten.sigmoid_backward,
    aten.tanh_backward, aten.threshold_backward, aten.gelu_backward, aten.silu_backward,
    aten._log_softmax_backward_data, aten._softmax_backward_data, aten.native_layer_norm_backward,
    aten.native_batch_norm_backward, aten.native_group_norm_backward, aten.select_scatter,
    aten.masked_fill, aten.rsub, aten.clamp_min, aten.clamp_max, aten.zeros_like, aten.ones_like, aten.repeat,
    aten.round.decimals,
]
# Attention stays whole: PyTorch's fused kernel is faster than its pieces, and core ATen's CPU
# decomposition of the forward does not give the logsumexp the fused backward reads (wrong gradients).
KEPT_WHOLE = ("scaled_dot_product", "flash_attention", "efficient_attention")
DECOMPOSITIONS = {op: fn for op, fn in {**core_aten_decompositions(), **get_decompositions(EXTRA_DECOMPOSITIONS),
                                        **foreach_decompositions(), **bernoulli_decompositions(),
                                        **braze_decompositions()}.items()
                  if not any(name in str(op) for name in KEPT_WHOLE)}

REGION_PREFIX = "braze_region_"
_SHORT = {"forward": "fwd", "backward": "bwd", "inference": "inf"}  # in kernel names
_graph_ids = itertools.count()


@dataclass
class GraphReport:
    """One ATen graph the backend compiled: its regions and the ops left to PyTorch (with why)."""

    graph: str
    regions: list[RegionReport] = field(default_factory=list)
    torch_ops: Counter = field(default_factory=Counter)  # (op, reason) -> count
    record_launches: bool = False


def backend(gm: fx.GraphModule, example_inputs: list, *, mode: str | None = None,
            options: Mapping[str, object] | None = None) -> Callable:
    """The `braze` backend of `torch.compile` (`torch.compile(model, backend="braze", options={...})`):
    forward and backward graphs through braze's fusions. `options` are described by `Options`."""
    return make_backend(parse_options(options, mode))(gm, example_inputs)


def make_backend(options: Options, reports: list[GraphReport] | None = None,
                 record_launches: bool = False) -> Callable:
    """A Dynamo backend with these options; each ATen graph compiled appends its report to `reports`,
    and with `record_launches` each region's report lists the kernels its calls launch."""

    def compiler(kind: str) -> Callable:
        def compile_graph(gm: fx.GraphModule, example_inputs: list) -> Callable:
            report = GraphReport(kind, record_launches=record_launches)
            if reports is not None:
                reports.append(report)
            if kind == "inference":  # a training graph's matmuls and random ops were done in `partition`
                pad_matmuls(gm, _pad_mode(options))
                key_random_ops(gm, _takes_random(options, gm))
            return make_boxed_func(fuse_graph(gm, options, report).forward)

        return compile_graph

    def partition(joint: fx.GraphModule, joint_inputs: list, **kwargs: object) -> tuple:
        """The partition `options.partition` names (`Options`), after unaligned matrix multiplies are
        padded (on the joint graph, so the forward and the backward share a padded weight) and braze's
        random numbers are keyed by a seed and their masks replayed in the backward (rng.py): the
        seed is saved, not the masks."""
        pad_matmuls(joint, _pad_mode(options))
        replay_in_backward(joint, key_random_ops(joint, _takes_random(options, joint)))
        if options.partition == "min_cut":
            # Without its common-subexpression pass, which would merge the backward's replayed
            # random numbers back into the forward's and save the masks after all.
            with functorch_config.patch(cse=False):
                return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
        return default_partition(joint, joint_inputs, **kwargs)

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                        inference_compiler=compiler("inference"), partition_fn=partition,
                        decompositions=DECOMPOSITIONS)


def _pad_mode(options: Options) -> str:
    """How `pad_matmuls` treats the graphs: `options['pad_mm']`, unless `BRAZE_DISABLE=pad_mm`."""
    if options.pad_mm is False or config.disabled("pad_mm"):
        return "off"
    return "always" if options.pad_mm == "always" else "auto"


def _takes_random(options: Options, gm: fx.GraphModule) -> Callable[[fx.Node], bool]:
    device = graph_device(gm.graph)
    return lambda node: takes_random_node(node, options, device)


def fuse_graph(gm: fx.GraphModule, options: Options, report: GraphReport) -> fx.GraphModule:
    """Replaces the regions braze supports in `gm` by `BrazeRegion` modules; returns `gm`."""
    support = BrazeSupport(options, graph_device(gm.graph))
    partitions, small = [], []
    for partition in propose_partitions(gm, support.takes):
        for node in _views_to_torch(gm, partition):
            support.refused[node.name] = "a view of a region's output: PyTorch makes it, with the strides it expects"
        (partitions if _fused_op_count(partition) >= options.min_region_ops else small).append(partition)
    for partition in small:
        for node in partition.nodes:
            support.refused[node.name] = _small_region_reason(options)
    fuse_by_partitions(gm, [p.nodes for p in partitions], prefix=REGION_PREFIX, always_return_tuple=True)
    graph_id = next(_graph_ids)
    built_alike: dict[tuple, tuple[BuiltRegion | None, str | None]] = {}  # region_key -> the fusion regions alike share
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target.startswith(REGION_PREFIX):
            name = f"torch_{_SHORT[report.graph]}{graph_id}_{node.target.removeprefix(REGION_PREFIX)}"
            submodule = getattr(gm, node.target)
            device = support.device or torch.device("cpu")
            carriers = add_carriers(gm, node, missing_symbols(submodule), device)
            if not carriers and not _reads_a_tensor(submodule):
                carriers = add_device_anchor(gm, node, device)
            region = _make_region(submodule, carriers, name, options, report, built_alike)
            setattr(gm, node.target, region)
        elif node.op == "call_function" and not _takes_region_output(node):
            report.torch_ops[(op_name(node.target), support.refused.get(node.name, "not offered to braze"))] += 1
    gm.recompile()
    compile_regions_ahead(gm)
    return gm


def _reads_a_tensor(region: fx.GraphModule) -> bool:
    """Whether the region reads a tensor as an array (a seed of random numbers is read as a number)."""
    return any(n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor) and not is_seed_input(n)
               for n in region.graph.nodes)


def _takes_region_output(node: fx.Node) -> bool:
    return node.target is operator.getitem and node.args[0].op == "call_module"


def _fused_op_count(partition: Partition) -> int:
    return sum(1 for node in partition.nodes if node.target not in NON_COMPUTE_OPS)


def _views_to_torch(gm: fx.GraphModule, partition: Partition) -> list[fx.Node]:
    """Makes PyTorch take the views a partition gives out: each view read outside the partition is
    replayed there on the partition's dense tensor it views, and views left with no reader leave the
    partition. braze then writes dense tensors only, and PyTorch makes the strided views its kernels
    expect (some, like attention's backward on the CPU, assume the strides they were traced with).
    Returns the views now in PyTorch."""
    in_torch = []
    for node in sorted(partition.nodes, key=_position):
        outside = [u for u in node.users if u not in partition.nodes]
        if node.target not in VIEW_OPS or not outside:
            continue
        replay = _replay_views(gm, node, partition)
        for user in outside:
            user.replace_input_with(node, replay[-1])
        in_torch.extend(replay)
    for node in sorted(partition.nodes, key=_position, reverse=True):
        if node.target in VIEW_OPS and not node.users:
            partition.remove_node(node)
            gm.graph.erase_node(node)
    return in_torch


def _replay_views(gm: fx.GraphModule, view: fx.Node, partition: Partition) -> list[fx.Node]:
    """A copy, outside the partition, of the chain of views in it that ends at `view` (last last)."""
    chain = [view]
    while chain[-1].args[0] in partition.nodes and chain[-1].args[0].target in VIEW_OPS:
        chain.append(chain[-1].args[0])
    copies, last = {}, view
    for node in reversed(chain):
        with gm.graph.inserting_after(last):
            last = copies[node] = gm.graph.node_copy(node, lambda n: copies.get(n, n))
        last.meta = dict(node.meta)
    return [copies[node] for node in reversed(chain)]


def _position(node: fx.Node) -> int:
    """A node's place in its graph (FX keeps graphs in topological order)."""
    positions = node.graph.__dict__.setdefault("_braze_positions", {})
    if node not in positions:
        positions.clear()
        positions.update({n: i for i, n in enumerate(node.graph.nodes)})
    return positions[node]


def _small_region_reason(options: Options) -> str:
    if options.min_region_ops == 1:
        return "only views around it: nothing for a kernel to compute"
    return f"a region of fewer than options['min_region_ops'] = {options.min_region_ops} ops"


def _make_region(submodule: fx.GraphModule, carriers: list[Carrier], name: str, options: Options,
                 report: GraphReport, built_alike: dict[tuple, tuple]) -> BrazeRegion:
    """The region's module; its fusion is the one of an earlier region alike (region_key.py) where
    there is one, so the layers of a model plan, lower and compile each of their regions once."""
    fused_ops = Counter(op_name(n.target) for n in submodule.graph.nodes if n.op == "call_function")
    region_report = RegionReport(report.graph, name, fused_ops, recording=report.record_launches)
    report.regions.append(region_report)
    key = region_key(submodule, carriers)
    if key is not None and key in built_alike:
        built, reason = built_alike[key]
    else:
        built, reason = _build(submodule, carriers, name, options)
        if key is not None:
            built_alike[key] = built, reason
    if built is None:
        region_report.runs_in, region_report.reason = "torch", reason
        warnings.warn(f"braze backend: region {name} runs in PyTorch; braze cannot build it: {reason}",
                      RuntimeWarning, stacklevel=2)
    return BrazeRegion(submodule, built, region_report, options)


def _build(submodule: fx.GraphModule, carriers: list[Carrier], name: str, options: Options
           ) -> tuple[BuiltRegion | None, str | None]:
    """The region's fusion, or None and why braze cannot build it (an error with `fallback='error'`)."""
    try:
        return RegionBuilder(submodule, name, carriers).build(RULES), None
    except Error as error:
        if options.fallback == "error":
            raise
        return None, f"{type(error).__name__}: {error}"
    except Exception as error:  # a defect of braze's own: the model still runs, and the warning names it
        if options.fallback == "error":
            raise
        return None, f"an internal error of braze's (please report it): {type(error).__name__}: {error}"
