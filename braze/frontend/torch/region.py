"""A fused region at run time: the module that stands in the graph where its ATen nodes were."""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import fx

from braze.errors import Error
from braze.frontend.torch.options import Options
from braze.frontend.torch.region_builder import BuiltRegion
from braze.record import record


@dataclass
class RegionReport:
    """What `explain` says of one region: the ops it fused, where it ran, and the kernels it launched."""

    graph: str  # "forward", "backward" or "inference"
    name: str
    fused_ops: Counter
    runs_in: str = "braze"  # or "torch", with `reason`
    reason: str | None = None
    kernels: list[str] = field(default_factory=list)
    recording: bool = False  # explain turns it on: each call then records its launches


class BrazeRegion(torch.nn.Module):
    """Calls the region's braze fusion; falls back to the partition's own PyTorch graph when braze
    cannot compile it (unless `options['fallback']` is `'error'`)."""

    def __init__(self, torch_graph: fx.GraphModule, built: BuiltRegion | None, report: RegionReport,
                 options: Options) -> None:
        super().__init__()
        self.torch_graph = torch_graph
        self.built = built
        self.report = report
        self.options = options
        self.torch_inputs = sum(1 for n in torch_graph.graph.nodes if n.op == "placeholder")

    def forward(self, *args: object) -> tuple:
        built = self.built
        if built is None:
            return self._in_torch(args)
        inputs = [args[i] for i in built.input_positions]
        for i in built.seed_inputs:  # a 0-d CPU tensor: its value goes into the launch, no copy to a device
            inputs[i] = int(inputs[i])
        try:
            if self.report.recording:
                with record() as rec:
                    outputs = built.fusion.execute(inputs)
                self.report.kernels.extend(launch.task for launch in rec.launches)
            else:
                outputs = built.fusion.execute(inputs)
        except Error as error:
            if self.options.fallback == "error":
                raise
            self._give_up(error)
            return self._in_torch(args)
        return tuple(outputs[slot] for slot in built.output_slots)

    def _in_torch(self, args: tuple) -> tuple:
        """The partition's own PyTorch graph, on its own inputs (not the extent carriers after them)."""
        return self.torch_graph(*args[:self.torch_inputs])

    def _give_up(self, error: Error) -> None:
        reason = f"braze could not run it: {type(error).__name__}: {error}"
        warnings.warn(f"braze backend: region {self.report.name} runs in PyTorch from now on; {reason}",
                      RuntimeWarning, stacklevel=3)
        self.built = None
        self.report.runs_in, self.report.reason = "torch", reason
