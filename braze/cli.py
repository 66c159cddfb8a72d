"""The `braze` command: `braze demo` runs the gallery, `braze info` shows what braze found."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys

from braze import config, engine


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def demo(args: argparse.Namespace) -> int:
    from braze.demo import run_gallery
    from braze.demo_gpu import gpu_available

    status = 0
    if args.backend in (None, "cuda") and gpu_available():
        status = gpu_demo(args)
        print()
    if args.backend == "cuda":
        return status
    rows = run_gallery(args.backend)
    print(_table(["fusion", "ops", "kernels", "max error vs NumPy", "backend", "ms/call", "NumPy ms", "speed-up"],
                 [[r.name, str(r.ops), str(r.kernels), f"{r.max_error:.2e}", r.backend, f"{r.ms_per_call:.3f}",
                   f"{r.numpy_ms_per_call:.3f}", f"{r.speedup:.1f}x"] for r in rows]))
    worst = max(r.max_error for r in rows)
    print(f"\n{len(rows)} fusions, worst error {worst:.2e}. NumPy has no erf: its gelu_bias time uses "
          "np.vectorize(math.erf).")
    particles_ok = particle_step_demo()
    return status or (0 if worst < 1e-3 and particles_ok else 1)


def particle_step_demo() -> bool:
    """The @bz.kernel particle step: launches and time fused against unfused; True when it matches NumPy."""
    from braze.demo_kernels import run_particle_step

    step = run_particle_step()
    print("\n@bz.kernel particle step (six loops; task fusion merges them):")
    print(_table(["particles", "launches fused", "unfused", "us/step fused", "unfused", "NumPy", "max error vs NumPy"],
                 [[str(step.particles), str(step.launches_fused), str(step.launches_unfused), f"{step.us_fused:.1f}",
                   f"{step.us_unfused:.1f}", f"{step.us_numpy:.1f}", f"{step.max_error:.2e}"]]))
    ok = step.max_error < 1e-5
    from braze.demo_kernels_gpu import gpu_available, run_particle_step_gpu

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
    from braze.demo_gpu import ROWS_FACTOR, run_gpu_gallery
    from braze.runtime import cuda_driver

    rows = run_gpu_gallery(with_compile=not args.no_compile)
    peers = sorted({p for r in rows for p in r.peers_us})
    print(f"On {cuda_driver.device(0).name} (the gallery with {ROWS_FACTOR}x the rows; CUDA events, medians):")
    print(_table(["fusion", "ops", "kernels", "max error vs NumPy", "us/call", "GB/s",
                  *(f"{p} us" for p in peers), *(f"x {p}" for p in peers)],
                 [[r.name, str(r.ops), str(r.kernels), f"{r.max_error:.2e}", f"{r.us_per_call:.1f}", f"{r.gbps:.0f}",
                   *(f"{r.peers_us[p]:.1f}" if p in r.peers_us else "-" for p in peers),
                   *(f"{r.peers_us[p] / r.us_per_call:.2f}" if p in r.peers_us else "-" for p in peers)]
                  for r in rows]))
    return 0 if max(r.max_error for r in rows) < 1e-3 else 1


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def info(args: argparse.Namespace) -> int:
    from braze.runtime import cuda_driver, nvrtc

    packages = ["braze", "numpy", "llvmlite", "ml_dtypes", "cuda-bindings", "nvidia-cuda-nvrtc", "torch", "cupy"]
    rows = [[p, _version(p)] for p in packages]
    rows += [["NVRTC", ".".join(map(str, nvrtc.version())) if nvrtc.available() else "not found"]]
    rows += [[f"cuda:{i}", f"{cuda_driver.device(i).name} ({cuda_driver.device(i).arch})"]
             for i in range(cuda_driver.device_count())] or [["GPU", "none found"]]
    rows += [["backends", ", ".join(sorted(engine.BACKENDS))], ["default backend", engine.DEFAULT_BACKEND],
             ["cache folder", str(config.current.cache_dir)], ["python", sys.version.split()[0]]]
    print(_table(["item", "value"], rows))
    return 0


def cache(args: argparse.Namespace) -> int:
    from braze.runtime import disk_cache

    folder = config.current.cache_dir
    if args.action == "clear":
        print(f"removed {disk_cache.clear()} entries from {folder}")
        return 0
    entries, size = disk_cache.usage()
    cap = config.current.cache_max_bytes
    print(f"{folder}: {entries} entries, {size / 1e6:.1f} MB of a {cap / 1e6:.1f} MB cap (BRAZE_CACHE_MAX_BYTES)")
    refusal = disk_cache.refusal()
    if refusal is not None:
        print(f"refused (the disk cache is off): {refusal}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="braze", description="braze: fused tensor kernels from Python")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="run the gallery of fusions and check them against NumPy")
    demo_parser.add_argument("--backend", default=None,
                             help="backend to run on (default: the GPU when there is one, then the CPU)")
    demo_parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out of the GPU table")
    demo_parser.set_defaults(run=demo)
    commands.add_parser("info", help="show versions, backends and the cache folder").set_defaults(run=info)
    cache_parser = commands.add_parser("cache", help="show or clear the disk cache of compiled kernels")
    actions = cache_parser.add_subparsers(dest="action", metavar="{show,clear}")
    actions.add_parser("show", help="print the cache folder, its entries, their bytes and the size cap (the default)")
    actions.add_parser("clear", help="remove every entry and leftover temporary file from the cache folder")
    cache_parser.set_defaults(run=cache, action="show")
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
