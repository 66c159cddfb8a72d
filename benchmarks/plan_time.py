"""Planning time of a model's CUDA kernels, per stage: what braze does on the host before NVRTC.

    python benchmarks/plan_time.py [--layers 12] [--seq 128] [--repeat 3] [--json PATH] [--sources PATH]
                                   [--profile PATH] [--nvrtc]

It runs one forward and backward of the GPT-2-small-sized language model of torch_models.py (d = 768,
12 heads, hidden 3072, vocabulary 50257, bf16 autocast) through the braze backend on the CPU and
keeps every region's fusion with the inputs of its first plan. Sizes do not matter beyond which
extents are 1: plans are symbolic in the rest, so a short sequence on the CPU plans what a GPU's
batch of 8 x 1024 tokens does. Then, for each region, it plans and generates the fusion's CUDA
(`engine.cuda_source`: no fusion cache, no disk cache, no GPU) and times the stages of
`engine.plan_kernel` (schedule, lower, the passes, the GPU's task merges) and the CUDA generator.
Each of `--repeat` passes plans every region from its fusion again (new Kernel IR, nothing kept from
the pass before); the fastest counts, since the machine may be busy, and the first is printed too.

It prints seconds per stage (each stage's own time, without the stages it calls) and writes them as
JSON with `--json`. `--sources` writes the generated CUDA of every region, one after another, to check
that a change to the planner leaves the code as it was; `--profile` writes a cProfile of the planning.
`--nvrtc` then compiles each region's programs (the units a kernel compiles as, side by side on a GPU
machine's cores: compile/cuda_kernel.kernel_programs) with NVRTC for sm_90, one after another, and
prints each region's seconds and its longest program's: a cold compile on enough cores waits for the
longest program of all.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "torch_backend"))
import torch_models  # noqa: E402
import torch_zoo  # noqa: E402

import braze.torch  # noqa: E402, F401  (registers the backend)
from braze import config, engine, schedule  # noqa: E402
from braze.codegen import cuda as cuda_codegen  # noqa: E402

# (module, attribute, stage): the functions timed, each under its stage's name. A stage's time is its
# own: a stage called inside another (the merges' lane plans inside task fusion) is not counted twice.
STAGES = (
    (schedule, "plan", "schedule"),
    (engine, "lower", "lower"),
    (engine, "simplify", "simplify"),
    (engine, "fold_row_producers", "fold_rows"),
    (engine, "grouped_by_range", "merge: group by range"),
    (engine, "fuse_tasks", "merge: fuse_tasks"),
    (engine, "_stays_splittable", "merge: stays splittable"),
    (engine, "plan_lanes", "merge: plan_lanes"),
    (engine, "fuse_sibling_loops", "merge: sibling loops"),
    (engine, "forward_stores", "merge: sibling loops"),
    (engine, "reuse_reductions", "merge: sibling loops"),
    (engine, "column_tasks_after_rows", "merge: column tasks"),
    (engine, "split_loops", "split_loops"),
    (cuda_codegen, "generate", "cuda generate"),
)


class StageClock:
    """Seconds per stage, each stage's own: the time of the stages it calls goes to them."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.stack: list[list] = []  # [stage, started, seconds of the stages it called]

    def timed(self, stage: str, fn: Callable) -> Callable:
        def run(*args, **kwargs):
            self.stack.append([stage, time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                _, started, inner = self.stack.pop()
                spent = time.perf_counter() - started
                self.seconds[stage] += spent - inner
                if self.stack:
                    self.stack[-1][2] += spent

        return run

    def install(self) -> Callable[[], None]:
        """Wraps every stage's function; returns what undoes it."""
        originals = [(module, name, getattr(module, name)) for module, name, _ in STAGES]
        for (module, name, stage), (_, _, fn) in zip(STAGES, originals):
            setattr(module, name, self.timed(stage, fn))

        def undo() -> None:
            for module, name, fn in originals:
                setattr(module, name, fn)

        return undo


def collect_regions(layers: int, seq: int) -> list[tuple[object, list]]:
    """(fusion, inputs) of every region of the model's forward and backward, in the order braze first
    planned them: the stand-ins `compile_ahead` got, else the arrays of the region's first call."""
    found: dict[int, tuple[object, list]] = {}
    ahead, execute = engine.compile_ahead, engine.execute

    def recording_ahead(fusion, inputs):
        found.setdefault(id(fusion), (fusion, list(inputs)))
        return ahead(fusion, inputs)

    def recording_execute(fusion, inputs, *args, **kwargs):
        found.setdefault(id(fusion), (fusion, list(inputs)))
        return execute(fusion, inputs, *args, **kwargs)

    c = torch_zoo.Config(dim=768, heads=12, hidden=3072)
    torch.manual_seed(0)
    model = torch_models.GPT2(c, layers, 50257, seq)
    tokens = torch.randint(0, 50257, (1, seq))
    engine.compile_ahead, engine.execute = recording_ahead, recording_execute
    try:
        with tempfile.TemporaryDirectory() as cache, config.scope(cache_dir=Path(cache)), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = torch.compile(model, backend="braze")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch_models._loss_of(run, (tokens,))
            loss.backward()
    finally:
        engine.compile_ahead, engine.execute = ahead, execute
    return list(found.values())


def plan_all(regions: list[tuple[object, list]], profile: cProfile.Profile | None = None
             ) -> tuple[dict[str, float], list[tuple[str, str]]]:
    """Seconds per stage over every region's `cuda_source`, and each region's (name, source)."""
    clock = StageClock()
    undo = clock.install()
    sources: list[tuple[str, str]] = []
    try:
        for fusion, inputs in regions:
            started = time.perf_counter()
            if profile is not None:
                profile.enable()
            source = engine.cuda_source(fusion, inputs)
            if profile is not None:
                profile.disable()
            clock.seconds["total"] += time.perf_counter() - started
            sources.append((getattr(fusion, "name", "fusion"), source))
    finally:
        undo()
    clock.seconds["other"] = clock.seconds["total"] - sum(s for name, s in clock.seconds.items() if name != "total")
    return dict(clock.seconds), sources


def nvrtc_seconds(sources: list[tuple[str, str]]) -> list[tuple[str, float, float]]:
    """(region, NVRTC's seconds for all its programs one after another, for its longest program)."""
    from braze.compile import nvrtc
    from braze.compile.cuda_kernel import kernel_programs

    rows = []
    for name, source in sources:
        generated = cuda_codegen.CudaSource(**{field.name: getattr(source, field.name)
                                               for field in dataclasses.fields(cuda_codegen.CudaSource)})
        times = []
        for program in kernel_programs(generated):
            started = time.perf_counter()
            nvrtc.compile_cubin(program.text, name, "sm_90")
            times.append(time.perf_counter() - started)
        rows.append((name, sum(times), max(times)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--json", type=Path, help="write the seconds per stage here")
    parser.add_argument("--sources", type=Path, help="write every region's CUDA source here")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the planning here")
    parser.add_argument("--nvrtc", action="store_true", help="then time NVRTC on each region's programs")
    parser.add_argument("--repeat", type=int, default=3, help="plan every region this many times; the fastest "
                        "pass counts (the machine may be busy with other work)")
    args = parser.parse_args()

    started = time.perf_counter()
    regions = collect_regions(args.layers, args.seq)
    print(f"{len(regions)} regions from one forward and backward on the CPU ({time.perf_counter() - started:.1f} s)")
    profile = cProfile.Profile() if args.profile else None
    seconds, sources = plan_all(regions, profile)
    first = seconds["total"]
    for _ in range(args.repeat - 1):
        again, _ = plan_all(regions)
        seconds = min(seconds, again, key=lambda s: s["total"])
    print(f"seconds in the fastest of {args.repeat} passes (the first took {first:.3f} s):")
    if profile is not None:
        profile.dump_stats(args.profile)
    width = max(map(len, seconds))
    for stage, s in sorted(seconds.items(), key=lambda item: (item[0] == "total", -item[1])):
        print(f"{stage:<{width}}  {s:8.3f} s")
    if args.json:
        args.json.write_text(json.dumps({"regions": len(regions), "first_pass": first, "seconds": seconds}, indent=2)
                             + "\n")
    if args.sources:
        args.sources.write_text("".join(f"// region {name}\n{source}\n" for name, source in sources))
    if args.nvrtc:
        rows = nvrtc_seconds(sources)
        print("NVRTC seconds, sm_90, one program after another:")
        for name, total, longest in sorted(rows, key=lambda row: -row[1]):
            print(f"{name:<24} {total:7.2f} s   longest program {longest:6.2f} s")
        total, longest = sum(row[1] for row in rows), max(row[2] for row in rows)
        print(f"{'all regions':<24} {total:7.2f} s   longest program {longest:6.2f} s")


if __name__ == "__main__":
    main()
