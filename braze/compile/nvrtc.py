"""CUDA C++ to a cubin with NVRTC (`cuda.bindings.nvrtc`); needs no GPU.

The cubin is machine code (SASS) for one architecture, not PTX: a newer NVRTC then still works
with an older driver. `cuda_fp16.h` and `cuda_bf16.h` are not in the NVRTC wheel; they ship in
the CUDA runtime wheel, found with `cuda.pathfinder`.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from braze import config
from braze.compile import disk_cache
from braze.errors import CompileError, UnsupportedError

INSTALL_HINT = "install braze's CUDA extra: pip install 'braze[cuda]' (cuda-bindings, NVRTC and the CUDA headers)"


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise UnsupportedError(f"CUDA: cuda.bindings.nvrtc is not importable ({e}); {INSTALL_HINT}") from None
    return nvrtc


def available() -> bool:
    try:
        _nvrtc()
        return bool(header_dirs())
    except (UnsupportedError, CompileError):
        return False


@functools.cache
def header_dirs() -> tuple[str, ...]:
    """The folders holding cuda_fp16.h and cuda_bf16.h."""
    try:
        import cuda.pathfinder as pathfinder
        found = pathfinder.find_nvidia_header_directory("cudart")
    except Exception:  # noqa: BLE001  (any failure of the finder means: look elsewhere)
        found = None
    candidates = [found] if found else []
    candidates += [str(Path(os.environ[v]) / "include") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    dirs = tuple(d for d in candidates if d and (Path(d) / "cuda_fp16.h").exists())
    if not dirs:
        raise UnsupportedError(f"CUDA: cuda_fp16.h was not found; {INSTALL_HINT}")
    return dirs


@functools.cache
def toolchain_id() -> str:
    """Names the NVRTC in cache keys. The wheel's version, when there is one, is read from the name
    of its metadata folder: loading the library to ask it costs tens of milliseconds, and
    importlib.metadata's search a millisecond, which a warm-cache first call would pay for nothing."""
    wheel = _wheel_version("nvidia_cuda_nvrtc")
    return f"nvrtc-wheel-{wheel}" if wheel else f"nvrtc-{version()}"


def _wheel_version(project: str) -> str | None:
    """The version of an installed wheel, from its `<project>-<version>.dist-info` folder."""
    prefix, suffix = project + "-", ".dist-info"
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith(suffix):
                return name[len(prefix):-len(suffix)]
    return None


@functools.cache
def version() -> tuple[int, int]:
    nvrtc = _nvrtc()
    _check(nvrtc, nvrtc.nvrtcVersion()[0], "nvrtcVersion")
    _, major, minor = nvrtc.nvrtcVersion()
    return major, minor


def _check(nvrtc, result, what: str) -> None:
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC {what} failed: {nvrtc.nvrtcGetErrorString(result)[1].decode()}")


def compile_cubin(source: str, name: str, arch: str, options: tuple[str, ...] = ()) -> bytes:
    """Compiles `source` for `arch` ("sm_90"); on failure raises CompileError naming `name`, with the
    compiler log, and saves the source where the message says."""
    return _compile(source, name, arch, options, "CUBIN")


def compile_ptx(source: str, name: str, arch: str, options: tuple[str, ...] = ()) -> bytes:
    """PTX for the virtual architecture of `arch`: the whole front end and optimizer, without the
    assembler (for checking sources quickly)."""
    return _compile(source, name, arch.replace("sm_", "compute_"), options, "PTX")


def _compile(source: str, name: str, arch: str, options: tuple[str, ...], output: str) -> bytes:
    nvrtc = _nvrtc()
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _check(nvrtc, result, "nvrtcCreateProgram")
    try:
        flags = [f"--gpu-architecture={arch}", "-std=c++17", "--fmad=false", "-default-device", *options,
                 *(f"-I{d}" for d in header_dirs())]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(flags), [f.encode() for f in flags])
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"CUDA kernel {name!r} failed to compile for {arch}:\n{_log(nvrtc, program)}\n"
                               f"(source saved to {_save_failed(source, name)})")
        result, size = getattr(nvrtc, f"nvrtcGet{output}Size")(program)
        _check(nvrtc, result, f"nvrtcGet{output}Size")
        binary = b" " * size
        _check(nvrtc, getattr(nvrtc, f"nvrtcGet{output}")(program, binary)[0], f"nvrtcGet{output}")
        return binary
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _log(nvrtc, program) -> str:
    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    return log.rstrip(b"\x00").decode(errors="replace").strip()


def _save_failed(source: str, name: str) -> Path | str:
    """Where the failed source was saved: `$BRAZE_CACHE_DIR/failed/<name>.cu`, a new private file."""
    saved = disk_cache.write_private_file("failed", f"{name}.cu", source)
    return saved if saved is not None else f"nowhere: {config.current.cache_dir / 'failed'} is not writable or refused"
