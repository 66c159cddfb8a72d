"""The fusion suite: fusions from real models (braze/cli/bench/cases.py), in float32 and bfloat16 at
LLM-sized shapes, braze against torch eager, torch.compile and JAX (jax.jit) on one GPU, in one run.

    braze bench [--quick] [--cases a,b] [--out PATH]    # the GPU suite (the CPU one where there is no GPU)
    braze bench --cpu [--quick] [--cases a,b]           # the llvm backend against NumPy

(`python benchmarks/suite.py` in a checkout runs the same, writing to benchmarks/results/.)

Every result (braze's and each peer's) is checked against a float64 NumPy reference on the same random
data, braze's outputs poisoned first (0xFF bytes: NaN). A wrong result is reported as WRONG, one that
raises (does not compile, runs out of memory) as FAIL with the exception's first line; the suite goes on.

Bandwidth = bytes that must cross DRAM (each input read once, each output written once) / the median
time: on the GPU CUDA events after warm-up (braze/cli/bench/timing.py's device_ms), with inputs rotated over
copies where they would fit in L2; JAX, on streams of its own, by wall time over batches of calls.
The copy bandwidth (a large device-to-device copy, bytes read + written) is measured in the same run.
Prints a line per case as it goes, then a table; writes JSON (braze-bench/suite-<device>.json under the
current folder, or --out) and a PNG plot of
percent of copy bandwidth per fusion beside it, where matplotlib is installed.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import re
import sys
from pathlib import Path

import numpy as np

from braze import config
from braze.cli.bench import report
from braze.cli.bench.cases import DROPOUT_P, Case, selected
from braze.cli.bench.check import Prepared, failed, host, is_float, jax_module, measure, run_jax
from braze.cli.bench.timing import median_ms

RESULTS = Path("braze-bench")  # under the current folder, unless the caller names another
ROTATE_L2S = 3  # inputs smaller than this many L2 caches are rotated over copies, so each call reads DRAM


def guarded(case: Case, row_of) -> dict:
    """row_of(case), or a row saying why the case could not even be set up (its inputs did not fit, say)."""
    try:
        return row_of(case)
    except Exception as e:  # noqa: BLE001  (the suite goes on with the next case)
        return {"case": case.name, "fusion": case.title, "dtype": case.dtype, "shape": [], "bytes": 0,
                "braze": failed(e)}


# --- the CPU section ---------------------------------------------------------------------------------
def numpy_peer(p: Prepared):
    """case.math in NumPy, floats in float32 (bfloat16 upcast first), outputs cast to braze's dtypes; the
    dropout mask is given (the check) or drawn by NumPy (timing)."""
    rng = np.random.default_rng(1)

    def run(*args, keep=None):
        floats = [a.astype(np.float32) if is_float(a) else a for a in args]
        extra = {}
        if p.case.dropout:
            extra["keep"] = keep if keep is not None else rng.random(args[0].shape, np.float32) >= DROPOUT_P
        return [np.asarray(o).astype(d) for o, d in zip(p.case.math(np, *floats, **extra), p.dtypes)]
    return run


def cpu_copy_gbps(nbytes: int) -> float:
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    return 2 * nbytes / median_ms(lambda: np.copyto(dst, src)) / 1e6


def cpu_row(p: Prepared, repeats: int) -> dict:
    row = p.row()
    if p.fusion is None:
        row["braze"] = failed(p.build_error)
    else:
        def check():
            with config.scope(enable="poison_outputs"):
                return [host(o) for o in p.fusion.execute(p.inputs)]
        row["braze"] = measure(check, lambda: median_ms(lambda: p.fusion.execute(p.inputs), repeats),
                               p.want, p.nbytes)
    peer = numpy_peer(p)
    row["numpy"] = measure(lambda: [host(o) for o in peer(*p.inputs, keep=p.keep)],
                           lambda: median_ms(lambda: peer(*p.inputs), repeats), p.want, p.nbytes)
    return row


def run_cpu(cases: list[Case], mode: str, repeats: int) -> dict:
    copy = cpu_copy_gbps((16 if mode == "quick" else 256) << 20)
    rows = []
    for case in cases:
        rows.append(guarded(case, lambda c: cpu_row(Prepared(c, mode), repeats)))
        print(f"[{len(rows)}/{len(cases)}] {report.progress(rows[-1], ('braze', 'numpy'))}", flush=True)
    return {"device": f"CPU ({os.cpu_count()} cores)", "copy_gbps": copy, "rows": rows}


# --- the GPU section ---------------------------------------------------------------------------------
def torch_inputs(torch, inputs: list) -> list:
    """The inputs on the GPU (bfloat16 through float32: exact); Python numbers stay as they are."""
    def put(a):
        if not isinstance(a, np.ndarray):
            return a
        if is_float(a) and a.dtype != np.float32 and a.dtype != np.float64:
            return torch.from_numpy(a.astype(np.float32)).cuda().to(torch.bfloat16)
        return torch.from_numpy(a).cuda()
    return [put(a) for a in inputs]


def rotation(torch, p: Prepared, l2_bytes: int) -> tuple[list[list], int]:
    """Copies of the GPU inputs, enough that cycling through them keeps every call's reads in DRAM."""
    read = sum(a.nbytes for a in p.inputs if isinstance(a, np.ndarray)) or 1
    copies = min(16, max(1, -(-ROTATE_L2S * l2_bytes // read)))
    first = torch_inputs(torch, p.inputs)
    return [first] + [[a.clone() if hasattr(a, "clone") else a for a in first] for _ in range(copies - 1)], copies


def profiled_launches(fusion, inputs: list) -> list[dict]:
    """Each kernel launch of one call, timed alone with CUDA events (bz.record(profile=True))."""
    import braze as bz

    with bz.record(profile=True) as rec:
        fusion.execute(list(inputs))
    return [{"task": la.task, "grid": la.chunks, "ms": la.device_ms, "gbps": la.gbps} for la in rec.launches]


def gpu_row(p: Prepared, torch, gpu, peer, jax, l2_bytes: int, repeats: int, launches: bool = False) -> dict:
    row = p.row()
    sets, row["input_copies"] = rotation(torch, p, l2_bytes)
    cycle = itertools.cycle(sets)
    timed = lambda fn: lambda: gpu.device_ms(lambda: fn(*next(cycle)), repeats)
    if p.fusion is None:
        row["braze"] = failed(p.build_error)
    else:
        def check():
            with config.scope(enable="poison_outputs"):
                return [host(o) for o in p.fusion.execute(sets[0])]
        row["braze"] = measure(check, timed(lambda *inputs: p.fusion.execute(list(inputs))), p.want, p.nbytes)
        if launches and "error" not in row["braze"]:
            row["launches"] = profiled_launches(p.fusion, sets[0])
    if peer is not None:
        keep = {"keep": torch.from_numpy(p.keep).cuda()} if p.case.dropout else {}
        for key, make in (("torch", lambda: peer), ("torch_compile", lambda: torch.compile(peer))):
            try:
                fn = make()
            except Exception as e:  # noqa: BLE001
                row[key] = failed(e)
                continue
            row[key] = measure(lambda fn=fn: [host(o) for o in fn(*sets[0], **keep)], timed(fn), p.want, p.nbytes)
    if jax is not None:
        row["jax"] = run_jax(jax, p, [p.inputs] * len(sets))
    return row


def run_gpu(cases: list[Case], mode: str, repeats: int, jax, peers: bool = True, launches: bool = False) -> dict:
    import torch

    from braze.cli.bench import timing as gpu  # CUDA-event timing and the copy ceiling

    try:
        from braze.cli.bench.torch_peers import PEERS
    except Exception as e:  # noqa: BLE001  (the torch versions are a peer: braze's rows still come)
        print(f"torch peers unavailable: {failed(e)['error']}")
        PEERS = {}  # noqa: N806
    if jax is not None and jax.default_backend() != "gpu":
        print(f"JAX runs on {jax.default_backend()}, not the GPU: its column is left out")
        jax = None
    copy = gpu.copy_ceiling_gbps(1 << 30)
    l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    rows = []
    for case in cases:
        peer = PEERS.get(case.name) if peers else None
        rows.append(guarded(case, lambda c, peer=peer: gpu_row(Prepared(c, mode), torch, gpu, peer, jax, l2_bytes,
                                                               repeats, launches)))
        print(f"[{len(rows)}/{len(cases)}] "
              f"{report.progress(rows[-1], ('braze', 'torch', 'torch_compile', 'jax'))}", flush=True)
        for launch in rows[-1].get("launches", ()):
            print(f"    {launch['task']:<28} grid={launch['grid']:<7} {launch['ms']:.3f} ms  {launch['gbps']:.0f} GB/s")
        print("row " + json.dumps(rows[-1]), file=sys.stderr, flush=True)  # kept if the run is cut short
        gc.collect()
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "copy_gbps": copy, "rows": rows}


def gpu_available() -> str | None:
    """Why the GPU section cannot run here (no torch, no CUDA device), or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (the GPU section times with it)"
    return None if torch.cuda.is_available() else "torch sees no CUDA device"


def default_out(results: Path, device: str, cpu: bool, mode: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    return results / f"suite-{'cpu' if cpu else slug}{'' if mode in ('gpu', 'cpu') else '-' + mode}.json"


def main(argv: list[str] | None = None, results: Path = RESULTS, prog: str | None = None) -> int:
    """The suite's command line; the JSON and plot go to `results` unless --out names a file."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small, odd shapes: a smoke test")
    parser.add_argument("--models", action="store_true",
                        help="GPU: each fusion at a shape a well-known model gives it (cases.MODEL_SHAPES)")
    parser.add_argument("--cases", help="comma list of case names (default: all)")
    parser.add_argument("--cpu", action="store_true", help="the llvm backend on NumPy arrays against NumPy")
    parser.add_argument("--out", type=Path, help="the JSON file to write (the plot goes beside it)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per measurement")
    parser.add_argument("--no-jax", action="store_true", help="leave JAX out (its compiles take most of a run)")
    parser.add_argument("--braze-only", action="store_true", help="GPU: no peers (a quick look at braze alone)")
    parser.add_argument("--launches", action="store_true", help="GPU: also time each kernel launch of a call")
    args = parser.parse_args(argv)
    if not args.cpu and (why := gpu_available()):
        print(f"no GPU section: {why}; running the CPU section (--cpu)")
        args.cpu = True
    mode = "quick" if args.quick else ("cpu" if args.cpu else ("models" if args.models else "gpu"))
    cases = selected(args.cases, mode)
    if args.cpu:
        result, peers = run_cpu(cases, mode, args.repeats), ("numpy",)
    else:
        jax = None if args.no_jax or args.braze_only else jax_module()
        result = run_gpu(cases, mode, args.repeats, jax, not args.braze_only, args.launches)
        peers = ("torch", "torch_compile", "jax")
    result.update(mode=mode, summary=report.summary(result["rows"], peers))
    print(report.table(result, peers))
    out = args.out or default_out(results, result["device"], args.cpu, mode)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    print(report.plot(result, peers, out.with_suffix(".png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
