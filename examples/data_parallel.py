"""Data-parallel training with braze's fusions inside each rank: one process a GPU, launched by
`torchrun`, gradients averaged by DistributedDataParallel over NCCL (gloo on the CPU).

    torchrun --nproc-per-node 2 examples/data_parallel.py             # two GPUs
    torchrun --nproc-per-node 2 examples/data_parallel.py --cpu       # two CPU processes, gloo
    torchrun --nproc-per-node 2 examples/data_parallel.py --bench 50  # step time, no eager twin

Each rank trains two copies of a small residual MLP (LayerNorm, GELU, dropout-free so that the
runs are comparable) from the same initial weights on the same batches: one through
`torch.compile(model, backend="braze")`, one in eager PyTorch, both wrapped in DDP. After every
step the losses must agree, and after the last step the parameters, within float32 tolerance;
rank 0 prints one JSON line with the largest differences and the braze launches of the last step
on its thread (tests/test_examples.py and
tests/cuda/test_data_parallel.py read it). With `--bench N` only the braze model trains, N timed
steps after a warm-up, and rank 0 prints the median step time and the samples a second over all
ranks (benchmarks/data_parallel.py compares one GPU with two).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import braze as bz
import braze.torch


class Block(nn.Module):
    """x + W2 gelu(W1 layer_norm(x)): the shape of a transformer's MLP half."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x)), approximate="tanh"))


def make_model(width: int, depth: int, device: torch.device) -> nn.Module:
    torch.manual_seed(0)  # every rank, and both twins, start from the same weights
    layers = [Block(width) for _ in range(depth)]
    return nn.Sequential(*layers, nn.LayerNorm(width), nn.Linear(width, 1)).to(device)


def batch(step: int, rank: int, size: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of `step`: its own slice of the data, the same for both twins."""
    generator = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(size, width, generator=generator)
    y = x[:, :8].sum(1, keepdim=True).tanh()
    return x.to(device), y.to(device)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()  # DDP averages the gradients over the ranks here
    optimizer.step()
    return loss.detach()


def twin(width: int, depth: int, device: torch.device, compiled: bool) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = make_model(width, depth, device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return (torch.compile(ddp, backend=braze.torch.backend) if compiled else ddp), optimizer


def compare(args: argparse.Namespace, rank: int, device: torch.device) -> dict:
    """Trains the braze twin and the eager twin side by side; the largest differences."""
    fused, fused_optimizer = twin(args.width, args.depth, device, compiled=True)
    eager, eager_optimizer = twin(args.width, args.depth, device, compiled=False)
    loss_difference, losses = 0.0, []
    for step in range(args.steps):
        x, y = batch(step, rank, args.batch, args.width, device)
        with bz.record() as recording:  # this thread's braze launches: the forward's at least
            fused_loss = train_step(fused, fused_optimizer, x, y)
        eager_loss = train_step(eager, eager_optimizer, x, y)
        loss_difference = max(loss_difference, abs(fused_loss.item() - eager_loss.item()) / abs(eager_loss.item()))
        losses.append(eager_loss.item())
    parameter_difference = max(
        ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
        for a, b in zip(fused.parameters(), eager.parameters()))
    return {"steps": args.steps, "losses": losses, "braze_launches": len(recording.launches),
            "loss_relative_difference": loss_difference,
            "parameter_relative_difference": parameter_difference}


def timed(run, device: torch.device) -> float:
    """Seconds `run` takes: by CUDA events on a GPU, the wall clock on the CPU."""
    if device.type != "cuda":
        start = time.perf_counter()
        run()
        return time.perf_counter() - start
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def bench(args: argparse.Namespace, rank: int, device: torch.device) -> dict:
    """The braze twin alone: median step time over `args.bench` steps after a warm-up."""
    model, optimizer = twin(args.width, args.depth, device, compiled=True)
    x, y = batch(0, rank, args.batch, args.width, device)
    times = []
    for _ in range(5 + args.bench):
        dist.barrier()
        times.append(timed(lambda: train_step(model, optimizer, x, y), device))
    step_time = statistics.median(times[5:])
    world = dist.get_world_size()
    return {"ranks": world, "per_rank_batch": args.batch, "step_ms": 1e3 * step_time,
            "samples_per_s": world * args.batch / step_time,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="train on the CPU with gloo (no GPU needed)")
    parser.add_argument("--steps", type=int, default=20, help="steps of the braze/eager comparison")
    parser.add_argument("--bench", type=int, default=0, help="time this many steps instead of comparing")
    parser.add_argument("--batch", type=int, default=None, help="samples a rank (default: 4096 GPU, 64 CPU)")
    parser.add_argument("--width", type=int, default=None, help="model width (default: 1024 GPU, 64 CPU)")
    parser.add_argument("--depth", type=int, default=4)
    args = parser.parse_args()
    cuda = not args.cpu
    args.batch = args.batch or (4096 if cuda else 64)
    args.width = args.width or (1024 if cuda else 64)
    rank = int(os.environ.get("RANK", 0))
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    try:
        result = bench(args, rank, device) if args.bench else compare(args, rank, device)
        if rank == 0:
            print(json.dumps(result), flush=True)
    finally:
        # The models (and their DDP reducers) are gone by now; the barrier keeps one rank from
        # tearing the group down while its peer's last collective is still in flight, which
        # gloo answers by aborting the process at exit.
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
