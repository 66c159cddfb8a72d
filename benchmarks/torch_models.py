"""PyTorch models under `torch.compile`: eager PyTorch, Inductor and the braze backend, side by side.

For each model of the test zoo (tests/torch_backend/torch_zoo.py, at benchmark sizes) and a 12-layer
GPT-2-small-sized language model (d = 768, batch 8 x 1024 tokens, bf16 autocast, fused AdamW), and
for each backend, it measures:

- cold compile: the first training step from nothing (Dynamo reset, empty braze and Inductor caches);
- inference step: a forward pass under `torch.no_grad()`;
- training step: forward, backward and the optimizer step;
- kernels per training step, counted by the profiler (CUPTI sees braze's launches too).

Step times are medians after warm-up steps, timed with CUDA events on the GPU (wall time on the CPU).
Prints a table with the ratios braze / Inductor and eager / braze, and writes JSON
(benchmarks/results/torch-models-<device>.json, or --out). It runs the GPU by default:

    python benchmarks/torch_models.py                 # every model, eager, inductor and braze
    python benchmarks/torch_models.py --quick         # small sizes, few repeats: a smoke run
    python benchmarks/torch_models.py --device cpu --models mlp,llama --backends eager,braze
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "torch_backend"))
import torch_zoo  # noqa: E402  (the model zoo of the tests)

import braze as bz  # noqa: E402
from braze import config  # noqa: E402

RESULTS = Path(__file__).parent / "results"
BACKENDS = ("eager", "inductor", "braze")


# --- models --------------------------------------------------------------------------------------------
class GPT2(nn.Module):
    """A GPT-2 language model of zoo blocks: token and position embeddings, blocks, final LayerNorm,
    the tied output projection and the cross-entropy loss of the next token."""

    def __init__(self, c: torch_zoo.Config, layers: int, vocab: int, context: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c.dim), nn.Embedding(context, c.dim)
        self.blocks = nn.ModuleList(torch_zoo.GPT2Block(c) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c.dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())


@dataclass
class Workload:
    name: str
    model: Callable[[], nn.Module]
    inputs: Callable[[torch.device], tuple]
    autocast: bool = False  # bf16 autocast around the forward


def _loss_of(model: nn.Module, inputs: tuple) -> torch.Tensor:
    out = model(*inputs)
    return out if out.dim() == 0 else out.float().square().mean()


def workloads(quick: bool) -> list[Workload]:
    c = torch_zoo.Config(dim=128, heads=4, hidden=512) if quick else torch_zoo.Config(dim=768, heads=12, hidden=3072)
    batch, seq = (2, 64) if quick else (8, 1024)
    generator = torch.Generator().manual_seed(0)

    def zoo(name: str, *sizes: int) -> Workload:
        make = {"gpt2": torch_zoo.gpt2, "llama": torch_zoo.llama, "bert": torch_zoo.bert}.get(name)
        model, make_inputs = make(c) if make else torch_zoo.ZOO[name]()
        return Workload(name, lambda: model, lambda device: tuple(t.to(device) for t in make_inputs(*sizes, generator)))

    gpt2_config = (c, 2 if quick else 12, 1024 if quick else 50257, seq)
    return [
        zoo("gpt2", batch, seq), zoo("llama", batch, seq), zoo("bert", batch, seq),
        zoo("resnet_block", 8 if quick else 32, 16 if quick else 56), zoo("mlp", 256 if quick else 4096, 0),
        Workload("gpt2_small_lm", lambda: GPT2(*gpt2_config),
                 lambda device: (torch.randint(0, gpt2_config[2], (batch, seq), generator=generator).to(device),),
                 autocast=True),
    ]


# --- timing --------------------------------------------------------------------------------------------
def median_ms(step: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> float:
    """The median time of `step` after `warmup` steps: CUDA events on a GPU, wall time on the CPU."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            step()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            start_s = time.perf_counter()
            step()
            samples.append((time.perf_counter() - start_s) * 1e3)
    return statistics.median(samples)


def kernels_per_step(step: Callable[[], object], device: torch.device) -> int | None:
    """GPU kernels one step launches, as the profiler records them (None on the CPU)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


# --- one backend on one workload --------------------------------------------------------------------------
def compiled(model: nn.Module, backend: str) -> Callable:
    if backend == "eager":
        return model
    return torch.compile(model, backend=backend)


def measure(work: Workload, backend: str, device: torch.device, quick: bool) -> dict:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = work.model().to(device)
    inputs = work.inputs(device)
    run = compiled(model, backend)
    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused) if fused else \
        torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if work.autocast else contextlib.nullcontext()

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = _loss_of(run, inputs)
        loss.backward()
        optimizer.step()

    def inference_step() -> None:
        with torch.no_grad(), autocast:
            run(*inputs)

    warmup, repeats = (2, 3) if quick else (5, 20)
    with _cold_caches():
        start = time.perf_counter()
        train_step()
        _sync(device)
        cold_s = time.perf_counter() - start
    row = {"model": work.name, "backend": backend, "cold_compile_s": round(cold_s, 3),
           "train_ms": median_ms(train_step, device, warmup, repeats),
           "kernels_per_train_step": kernels_per_step(train_step, device)}
    inference_step()  # compiles the inference graphs before they are timed
    row["inference_ms"] = median_ms(inference_step, device, warmup, repeats)
    return row


@contextlib.contextmanager
def _cold_caches():
    """Empty braze and Inductor caches, so the first step compiles everything."""
    with tempfile.TemporaryDirectory(prefix="torch-models-") as folder, config.scope(cache_dir=Path(folder)):
        import torch._inductor.config as inductor_config

        with inductor_config.patch(force_disable_caches=True):
            yield


# --- report ----------------------------------------------------------------------------------------------
def ratios(rows: list[dict]) -> list[dict]:
    """braze's time over Inductor's and eager's over braze's, per model, for both steps."""
    by = {(r["model"], r["backend"]): r for r in rows}
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        braze, inductor, eager = (by.get((model, b)) for b in ("braze", "inductor", "eager"))
        if braze is None:
            continue
        row = {"model": model}
        for step in ("train_ms", "inference_ms"):
            if inductor:
                row[f"braze_over_inductor_{step}"] = round(braze[step] / inductor[step], 3)
            if eager:
                row[f"eager_over_braze_{step}"] = round(eager[step] / braze[step], 3)
        if inductor:
            row["braze_over_inductor_cold_compile"] = round(braze["cold_compile_s"] / inductor["cold_compile_s"], 3)
        out.append(row)
    return out


def print_table(rows: list[dict]) -> None:
    print(f"{'model':16} {'backend':9} {'cold s':>8} {'train ms':>10} {'infer ms':>10} {'kernels':>8}")
    for r in rows:
        kernels = "-" if r["kernels_per_train_step"] is None else str(r["kernels_per_train_step"])
        print(f"{r['model']:16} {r['backend']:9} {r['cold_compile_s']:8.2f} {r['train_ms']:10.3f} "
              f"{r['inference_ms']:10.3f} {kernels:>8}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma list of eager, inductor, braze")
    parser.add_argument("--models", default=None, help="comma list (default: all)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    parser.add_argument("--out", type=Path, default=None, help="JSON output path")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: pass --device cpu", file=sys.stderr)
        return 1
    chosen = None if args.models is None else set(args.models.split(","))
    rows = []
    for work in workloads(args.quick):
        if chosen is not None and work.name not in chosen:
            continue
        for backend in args.backends.split(","):
            rows.append(measure(work, backend, device, args.quick))
            print_table(rows[-1:])
    print()
    print_table(rows)
    summary = ratios(rows)
    for row in summary:
        print(row)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    out = args.out or RESULTS / f"torch-models-{device.type}{'-quick' if args.quick else ''}.json"
    out.write_text(json.dumps({"device": name, "torch": torch.__version__, "braze": bz.__version__,
                               "rows": rows, "ratios": summary}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
