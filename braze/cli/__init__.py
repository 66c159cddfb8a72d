"""The `braze` command: `braze demo` runs the gallery, `braze info` shows what braze found,
`braze bench` runs the fusion suite (braze/cli/bench/).

The demos it runs live beside it: `gallery.py` (fusions, checked against NumPy) and `particles.py`
(a loop-kernel particle step), each with a `_gpu` module for the GPU; `benchmarks/` times them too.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import textwrap

from braze import config, engine


def _table(headers: list[str], rows: list[list[str]], numbers: bool = True) -> str:
    """Columns padded to their widest cell; after the first, right-aligned when they hold `numbers`."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) if i and numbers else c.ljust(w)
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def demo(args: argparse.Namespace) -> int:
    from braze.cli.gallery import numpy_erf, run_gallery

    if args.backend == "cuda":
        usable, reason = backend_status()["cuda"]
        if not usable:
            print(f"braze demo: the cuda backend is not usable here: {reason}", file=sys.stderr)
            return 1
        return gpu_demo(args)
    status = 0
    if args.backend is None and backend_status()["cuda"][0]:
        status = gpu_demo(args)
        print()
    rows = run_gallery(args.backend)
    print(_table(["fusion", "input", "ops", "kernels", "max error vs NumPy", "backend", "first call ms", "ms/call",
                  "NumPy ms", "speed-up"],
                 [[r.name, r.size, str(r.ops), str(r.kernels), f"{r.max_error:.2e}", r.backend,
                   f"{r.first_call_ms:.1f}", f"{r.ms_per_call:.3f}", f"{r.numpy_ms_per_call:.3f}",
                   f"{r.speedup:.1f}x"] for r in rows]))
    worst = max(r.max_error for r in rows)
    print("\n" + textwrap.fill(
        f"{len(rows)} fusions on float32 inputs, worst error {worst:.2e} against float64 NumPy. The first call "
        "compiles (or loads the disk cache); ms/call is a cached call. NumPy runs the same computation on the same "
        f"float32 data; its erf (gelu_bias) is {numpy_erf()[0]}.", 110))
    particles_ok = particle_step_demo()
    return status or (0 if worst < 1e-3 and particles_ok else 1)


def particle_step_demo() -> bool:
    """The @bz.kernel particle step: launches and time fused against unfused; True when it matches NumPy."""
    from braze.cli.particles import run_particle_step

    step = run_particle_step()
    print("\n@bz.kernel particle step (six loops; task fusion merges them):")
    print(_table(["particles", "launches fused", "unfused", "us/step fused", "unfused", "NumPy", "max error vs NumPy"],
                 [[str(step.particles), str(step.launches_fused), str(step.launches_unfused), f"{step.us_fused:.1f}",
                   f"{step.us_unfused:.1f}", f"{step.us_numpy:.1f}", f"{step.max_error:.2e}"]]))
    ok = step.max_error < 1e-5
    from braze.cli.particles_gpu import gpu_available, run_particle_step_gpu

    if gpu_available():
        gpu = run_particle_step_gpu(seconds=0.5, with_compile=False)
        peers = sorted(gpu.peers_us)
        print(f"\nOn {gpu.device}:")
        print(_table(["particles", "launches fused", "unfused", "us/step fused", "unfused",
                      *(f"{p} us" for p in peers), "max error vs NumPy"],
                     [[str(gpu.particles), str(gpu.launches_fused), str(gpu.launches_unfused), f"{gpu.us_fused:.1f}",
                       f"{gpu.us_unfused:.1f}", *(f"{gpu.peers_us[p]:.1f}" for p in peers),
                       f"{gpu.max_error:.2e}"]]))
        ok = ok and gpu.max_error < 1e-5
    return ok


def gpu_demo(args: argparse.Namespace) -> int:
    from braze.cli.gallery_gpu import ROWS_FACTOR, run_gpu_gallery
    from braze.compile import cuda_driver

    rows = run_gpu_gallery(with_compile=not args.no_compile)
    peers = sorted({p for r in rows for p in r.peers_us})
    print(f"On {cuda_driver.device(0).name} (the gallery with {ROWS_FACTOR}x the rows; CUDA events, medians):")
    print(_table(["fusion", "input", "ops", "kernels", "max error vs NumPy", "first call ms", "us/call", "GB/s",
                  *(f"{p} us" for p in peers), *(f"x {p}" for p in peers)],
                 [[r.name, r.size, str(r.ops), str(r.kernels), f"{r.max_error:.2e}", f"{r.first_call_ms:.1f}",
                   f"{r.us_per_call:.1f}", f"{r.gbps:.0f}",
                   *(f"{r.peers_us[p]:.1f}" if p in r.peers_us else "-" for p in peers),
                   *(f"{r.peers_us[p] / r.us_per_call:.2f}" if p in r.peers_us else "-" for p in peers)]
                  for r in rows]))
    print("The first call compiles (or loads the disk cache); us/call is a cached call, on the GPU's clock. "
          "x peer: the peer's time over braze's.")
    return 0 if max(r.max_error for r in rows) < 1e-3 else 1


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cuda_status() -> tuple[bool, str]:
    from braze.compile import cuda_driver, nvrtc
    from braze.errors import Error, UnsupportedError

    try:
        cuda_driver.driver()
    except UnsupportedError:  # no libcuda: the usual case on a machine without a GPU
        return False, "no NVIDIA GPU found (no NVIDIA driver is installed)"
    except Error as error:
        return False, f"no usable NVIDIA GPU ({error})"
    count = cuda_driver.device_count()
    if not count:
        return False, "no NVIDIA GPU found (the driver sees none)"
    if not nvrtc.available():
        return False, "NVRTC, the CUDA compiler, was not found: pip install 'braze[cuda]'"
    return True, ", ".join(f"cuda:{i} {cuda_driver.device(i).name} ({cuda_driver.device(i).arch})"
                           for i in range(count))


def _llvm_status() -> tuple[bool, str]:
    try:
        import llvmlite.binding as llvm
    except ImportError as error:
        return False, f"llvmlite is missing ({error}): pip install llvmlite"
    return True, "LLVM {}.{}.{} through llvmlite, on this machine's CPU".format(*llvm.llvm_version_info)


def backend_status() -> dict[str, tuple[bool, str]]:
    """Per backend: whether it can run here, and what it runs on or why it cannot."""
    found = {"cuda": _cuda_status, "llvm": _llvm_status, "reference": lambda: (True, "NumPy, op by op")}
    return {name: found[name]() for name in sorted(engine.BACKENDS)}


def info(args: argparse.Namespace) -> int:
    from braze.compile import nvrtc

    if args.knobs:
        return knobs()
    packages = ["braze", "numpy", "llvmlite", "ml_dtypes", "cuda-bindings", "nvidia-cuda-nvrtc", "torch", "cupy"]
    rows = [[p, _version(p)] for p in packages]
    rows += [["NVRTC", ".".join(map(str, nvrtc.version())) if nvrtc.available() else "not found"]]
    rows += [[name, ("usable: " if usable else "not usable: ") + reason]
             for name, (usable, reason) in backend_status().items()]
    rows += [["default backend", engine.DEFAULT_BACKEND],
             ["cache folder", str(config.current.cache_dir)], ["python", sys.version.split()[0]]]
    print(_table(["item", "value"], rows, numbers=False))
    return 0


def knobs() -> int:
    """Every environment variable braze reads, its value in this process, and what it does; then each
    feature BRAZE_ENABLE or BRAZE_DISABLE switches, and what switching it does."""
    rows = [[k.env, _knob_value(getattr(config.current, k.field)), k.help] for k in config.KNOBS]
    print(_table(["variable", "value here", "what it does"], rows, numbers=False))
    features = [[name, *text.split(": ", 1)] for name, text in config.FEATURES.items()]
    variable = {"enable": "BRAZE_ENABLE", "disable": "BRAZE_DISABLE"}
    print()
    print(_table(["feature", "switched by", "what switching it does"],
                 [[name, variable[which], what] for name, which, what in features], numbers=False))
    return 0


def _knob_value(value: object) -> str:
    if isinstance(value, frozenset):
        return ",".join(sorted(value)) or "(none)"
    return str(value)


def byte_size(n: int) -> str:
    """Bytes in the binary units BRAZE_CACHE_MAX_BYTES takes (`512M` is 512 MiB): `1.0 GiB`, `3.2 MiB`."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def cache(args: argparse.Namespace) -> int:
    from braze.compile import disk_cache

    folder = config.current.cache_dir
    if args.action == "clear":
        print(f"removed {disk_cache.clear()} entries from {folder}")
        return 0
    entries, size = disk_cache.usage()
    cap = config.current.cache_max_bytes
    print(f"{folder}: {entries} entries, {byte_size(size)} of a {byte_size(cap)} cap (BRAZE_CACHE_MAX_BYTES)")
    refusal = disk_cache.refusal()
    if refusal is not None:
        print(f"refused (the disk cache is off): {refusal}")
    return 0


def main(argv: list[str] | None = None) -> int:
    import braze

    parser = argparse.ArgumentParser(prog="braze", description="braze: fused tensor kernels from Python")
    parser.add_argument("--version", action="version", version=f"braze {braze.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="run the gallery of fusions and check them against NumPy",
                                      description="Runs small fusions users write (GELU, RoPE, norms, softmax, "
                                      "cross-entropy) and a @bz.kernel particle step, checks each against "
                                      "float64 NumPy and times it against NumPy (and, on a GPU, torch).")
    demo_parser.add_argument("--backend", default=None, choices=sorted(engine.BACKENDS),
                             help="backend to run on (default: the GPU when there is one, then the CPU)")
    demo_parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out of the GPU table")
    demo_parser.set_defaults(run=demo)
    info_parser = commands.add_parser("info", help="show versions, which backends are usable here (and why not), "
                                                   "the cache folder")
    info_parser.add_argument("--knobs", action="store_true", help="list the BRAZE_* environment variables instead")
    info_parser.set_defaults(run=info)
    cache_parser = commands.add_parser("cache", help="show or clear the disk cache of compiled kernels")
    actions = cache_parser.add_subparsers(dest="action", metavar="{show,clear}")
    actions.add_parser("show", help="print the cache folder, its entries, their bytes and the size cap (the default)")
    actions.add_parser("clear", help="remove every entry and leftover temporary file from the cache folder")
    cache_parser.set_defaults(run=cache, action="show")
    # The suite parses its own options (`braze bench --help` lists them).
    commands.add_parser("bench", add_help=False, help="run the fusion suite (fusions from real models) against "
                        "torch, torch.compile and JAX on a GPU, or NumPy on the CPU; writes a table, JSON and a plot")
    args, rest = parser.parse_known_args(argv)
    if args.command == "bench":
        from braze.cli.bench.suite import main as suite

        return suite(rest, prog="braze bench")
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args.run(args)
