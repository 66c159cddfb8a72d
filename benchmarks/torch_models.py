"""PyTorch models under `torch.compile`: eager PyTorch, Inductor and the braze backend, side by side.

For each model of the test zoo (tests/torch_backend/torch_zoo.py, at benchmark sizes) and a 12-layer
GPT-2-small-sized language model (d = 768, batch 8 x 1024 tokens, bf16 autocast, fused AdamW), and
for each backend, it measures:

- cold compile: the first forward and backward from nothing (Dynamo reset, empty braze and Inductor
  caches), and the loss it gives (the backends should agree on it: the weights and inputs are the same);
- forward+backward: the step the backends compile, gradients set to None before it;
- training step: forward, backward and the optimizer step (the optimizer runs eagerly in all three);
- inference step: a forward pass under `torch.no_grad()`;
- kernels per training step, counted by the profiler (CUPTI sees braze's launches too), on the GPU;
- for braze, the regions that fell back to PyTorch (each warns once).

Step times are medians after warm-up steps, timed with CUDA events on the GPU (wall time on the CPU).
It prints a table and each backend's time over Inductor's per model, and writes JSON (--out, else
benchmarks/results/torch-models-<device>[-quick].json). A model that fails on one backend gets an
`error` in its row and the run goes on. On the GPU each model and backend runs in a process of its
own (`--one-process`: all in this one). It runs the GPU by default:

    python benchmarks/torch_models.py                 # every model, eager, inductor and braze
    python benchmarks/torch_models.py --models gpt2,llama --out /tmp/zoo.json
    python benchmarks/torch_models.py --cpu --quick --models mlp --backends eager,braze   # a smoke run
    python benchmarks/torch_models.py --models gpt2_small_lm --backends aot_eager,braze   # the cold floor
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
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
from braze.frontend.torch import backend as torch_backend  # noqa: E402

RESULTS = Path(__file__).parent / "results"
BACKENDS = ("eager", "inductor", "braze")
# Also accepted: Dynamo and AOTAutograd with eager PyTorch kernels, the floor under a backend built on
# them. Its cold compile is the part of braze's that braze shares with every such backend.
KNOWN_BACKENDS = (*BACKENDS, "aot_eager")
STEPS = ("forward_backward_ms", "train_ms", "inference_ms")


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
    """One model: `build()` gives a fresh module and its inputs (CPU tensors), the same at every call."""

    name: str
    make: Callable[[torch.Generator], tuple[nn.Module, tuple]]
    autocast: bool = False  # bf16 autocast around the forward

    def build(self) -> tuple[nn.Module, tuple]:
        torch.manual_seed(0)
        return self.make(torch.Generator().manual_seed(1))


def _loss_of(model: Callable, inputs: tuple) -> torch.Tensor:
    out = model(*inputs)
    return out if out.dim() == 0 else out.float().square().mean()


def workloads(quick: bool) -> list[Workload]:
    c = torch_zoo.Config(dim=64, heads=4, hidden=256) if quick else torch_zoo.Config(dim=768, heads=12, hidden=3072)
    batch, seq = (2, 32) if quick else (8, 1024)
    layers, vocab = (2, 512) if quick else (12, 50257)
    channels, images, image_size = (8, 4, 16) if quick else (64, 32, 56)
    mlp_sizes, mlp_batch = ((16, 32, 4), 64) if quick else ((1024, 4096, 1024), 8192)

    def block(builder: Callable) -> Callable:
        def make(g: torch.Generator) -> tuple[nn.Module, tuple]:
            model, make_inputs = builder(c)
            return model, make_inputs(batch, seq, g)

        return make

    return [
        Workload("gpt2", block(torch_zoo.gpt2)),
        Workload("llama", block(torch_zoo.llama)),
        Workload("bert", block(torch_zoo.bert)),
        Workload("resnet_block", lambda g: (torch_zoo.BasicBlock(channels),
                                            (torch.randn(images, channels, image_size, image_size, generator=g),))),
        Workload("mlp", lambda g: (torch_zoo.MLP(*mlp_sizes), (torch.randn(mlp_batch, mlp_sizes[0], generator=g),))),
        Workload("gpt2_small_lm", lambda g: (GPT2(c, layers, vocab, seq),
                                             (torch.randint(0, vocab, (batch, seq), generator=g),)), autocast=True),
    ]


# --- timing --------------------------------------------------------------------------------------------
STEPS_A_SAMPLE = 5


def median_ms(step: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> float:
    """The median time of `step` after `warmup` steps: CUDA events on a GPU, wall time on the CPU.
    On a GPU a sample is STEPS_A_SAMPLE steps back to back, as a training or serving loop runs them:
    a single step timed from an idle GPU also counts the host's start of the step, and varied from
    process to process (braze's GPT-2-small inference on an H100: 6.2 to 8.2 ms a step)."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(STEPS_A_SAMPLE):
                step()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / STEPS_A_SAMPLE)
        else:
            start_s = time.perf_counter()
            step()
            samples.append((time.perf_counter() - start_s) * 1e3)
    return round(statistics.median(samples), 4)


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
    # braze's backend by its function: the name is registered by installing the package (its
    # torch_dynamo_backends entry point), which a checkout on the path has not done.
    if backend == "eager":
        return model
    return torch.compile(model, backend=torch_backend if backend == "braze" else backend)


def measure(work: Workload, backend: str, device: torch.device, warmup: int, repeats: int) -> dict:
    """One row: the model's times on one backend, or the error that stopped it."""
    row = {"model": work.name, "backend": backend}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RuntimeWarning)
            row.update(_measure(work, backend, device, warmup, repeats))
        if backend == "braze":
            row["braze_fallbacks"] = sorted({str(w.message) for w in caught if "runs in PyTorch" in str(w.message)})
    except Exception as error:  # noqa: BLE001  (a failure is a result: the other rows still run)
        row["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    return row


def _measure(work: Workload, backend: str, device: torch.device, warmup: int, repeats: int) -> dict:
    torch._dynamo.reset()
    model, inputs = work.build()
    model, inputs = model.to(device), tuple(t.to(device) for t in inputs)
    run = compiled(model, backend)
    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if work.autocast else contextlib.nullcontext()

    def forward_backward() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = _loss_of(run, inputs)
        loss.backward()
        return loss

    def train_step() -> None:
        forward_backward()
        optimizer.step()

    def inference_step() -> None:
        with torch.no_grad(), autocast:
            run(*inputs)

    with _cold_caches():
        start = time.perf_counter()
        loss = forward_backward()
        _sync(device)
        cold_s = time.perf_counter() - start
    return {"cold_compile_s": round(cold_s, 3), "first_loss": loss.item(),
            "forward_backward_ms": median_ms(forward_backward, device, warmup, repeats),
            "train_ms": median_ms(train_step, device, warmup, repeats),
            "inference_ms": median_ms(inference_step, device, warmup + 1, repeats),  # +1: compiles inference
            "kernels_per_train_step": kernels_per_step(train_step, device)}


ROW_MARK = "row: "


def measure_apart(model: str, backend: str, args: argparse.Namespace) -> dict:
    """One row measured in a process of its own. A backend measured after another in one process
    ran slower than alone (on an H100, braze's GPT-2 forward and backward took 27.6 ms after
    Inductor's run, 23.1 ms alone): each starts clean, as a user's training job does."""
    command = [sys.executable, __file__, "--row", "--models", model, "--backends", backend,
               "--device", args.device, "--warmup", str(args.warmup), "--repeats", str(args.repeats)]
    done = subprocess.run(command + (["--quick"] if args.quick else []), capture_output=True, text=True)
    rows = [line[len(ROW_MARK):] for line in done.stdout.splitlines() if line.startswith(ROW_MARK)]
    if not rows:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"model": model, "backend": backend, "error": f"its process exited with {done.returncode}: {last}"}
    return json.loads(rows[-1])


@contextlib.contextmanager
def _cold_caches():
    """Empty braze and Inductor caches, so the first step compiles everything."""
    with tempfile.TemporaryDirectory(prefix="torch-models-") as folder, config.scope(cache_dir=Path(folder)):
        import torch._inductor.config as inductor_config

        with inductor_config.patch(force_disable_caches=True):
            yield


# --- report ----------------------------------------------------------------------------------------------
def ratios(rows: list[dict]) -> list[dict]:
    """Per model: each backend's step times over Inductor's (below 1: faster than Inductor), eager's
    over braze's (braze's speedup), and braze's cold compile over Inductor's."""
    by = {(r["model"], r["backend"]): r for r in rows if "error" not in r}
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        braze, inductor, eager = (by.get((model, b)) for b in ("braze", "inductor", "eager"))
        row = {"model": model}
        for step in STEPS:
            for name, timed in (("braze", braze), ("eager", eager)):
                if timed and inductor:
                    row[f"{name}_over_inductor_{step}"] = round(timed[step] / inductor[step], 3)
            if eager and braze:
                row[f"eager_over_braze_{step}"] = round(eager[step] / braze[step], 3)
        if braze and inductor:
            row["braze_over_inductor_cold_compile"] = round(braze["cold_compile_s"] / inductor["cold_compile_s"], 3)
        if len(row) > 1:
            out.append(row)
    return out


def print_table(rows: list[dict]) -> None:
    print(f"{'model':14} {'backend':9} {'cold s':>7} {'loss':>9} {'fwd+bwd ms':>11} {'train ms':>10} "
          f"{'infer ms':>10} {'kernels':>8}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:14} {r['backend']:9} FAILED: {r['error']}")
            continue
        kernels = "-" if r["kernels_per_train_step"] is None else str(r["kernels_per_train_step"])
        print(f"{r['model']:14} {r['backend']:9} {r['cold_compile_s']:7.2f} {r['first_loss']:9.4g} "
              f"{r['forward_backward_ms']:11.3f} {r['train_ms']:10.3f} {r['inference_ms']:10.3f} {kernels:>8}")
        for fallback in r.get("braze_fallbacks", []):
            print(f"{'':25}{fallback}")


def print_ratios(summary: list[dict]) -> None:
    print(f"\n{'model':14} {'braze/inductor fwd+bwd':>23} {'train':>7} {'infer':>7} {'cold':>6} "
          f"{'eager/braze fwd+bwd':>20}")
    for r in summary:
        cells = [r.get(f"braze_over_inductor_{s}") for s in STEPS] + [r.get("braze_over_inductor_cold_compile"),
                                                                       r.get("eager_over_braze_forward_backward_ms")]
        text = ["-" if v is None else f"{v:.3f}" for v in cells]
        print(f"{r['model']:14} {text[0]:>23} {text[1]:>7} {text[2]:>7} {text[3]:>6} {text[4]:>20}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--cpu", action="store_true", help="the same as --device cpu")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="comma list of eager, inductor, braze (the default), aot_eager")
    parser.add_argument("--models", default=None, help="comma list (default: all)")
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats: a smoke run")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps before timing (5; 1 with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="timed steps per median (20; 3 with --quick)")
    parser.add_argument("--out", type=Path, default=None, help="JSON output path")
    parser.add_argument("--one-process", action="store_true",
                        help="on the GPU, measure every backend in this process (by default each in its own)")
    parser.add_argument("--row", action="store_true", help=argparse.SUPPRESS)  # a child's one row, as JSON
    args = parser.parse_args(argv)
    if args.cpu:
        args.device = "cpu"
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5)
    args.repeats = args.repeats if args.repeats is not None else (3 if args.quick else 20)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: pass --cpu", file=sys.stderr)
        return 1
    backends = args.backends.split(",")
    known = workloads(args.quick)
    chosen = [w.name for w in known] if args.models is None else args.models.split(",")
    unknown = sorted(set(chosen) - {w.name for w in known}) + sorted(set(backends) - set(KNOWN_BACKENDS))
    if unknown:
        print(f"unknown model or backend: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.row:
        (work,) = [w for w in known if w.name in chosen]
        print(ROW_MARK + json.dumps(measure(work, backends[0], device, args.warmup, args.repeats)))
        return 0
    apart = device.type == "cuda" and not args.one_process
    rows = []
    for work in known:
        if work.name in chosen:
            for backend in backends:
                rows.append(measure_apart(work.name, backend, args) if apart
                            else measure(work, backend, device, args.warmup, args.repeats))
                print_table(rows[-1:])
    print()
    print_table(rows)
    summary = ratios(rows)
    print_ratios(summary)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    out = args.out or RESULTS / f"torch-models-{device.type}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": name, "torch": torch.__version__, "braze": bz.__version__,
                               "quick": args.quick, "warmup": args.warmup, "repeats": args.repeats,
                               "rows": rows, "ratios": summary}, indent=2) + "\n")
    print(f"wrote {out}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
