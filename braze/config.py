"""Typed knobs, read from the environment once (docs/architecture.md, "Knobs and dumps"). Tests override
them with `scope`."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from braze.errors import InputError

DUMP_NAMES = frozenset({
    "fusion_ir", "segments", "scheduler_params", "kernel_ir", "cuda_kernel", "llvm_ir", "ptx",
    "launch_params", "kernel_args", "host_program", "host_jit", "fusion_decisions", "cuda_to_file",
})
# What BRAZE_ENABLE / BRAZE_DISABLE switch: `fast_math` (enable: fast-math flags in CPU kernels),
# `poison_outputs` (enable: new GPU outputs start as 0xFF bytes), `disk_cache` (disable: no
# compiled code read from or written to disk), `host_jit` (disable: shape functions run in
# Python instead of native code), `simplify` (disable: Kernel IR is not simplified), `fast_call`
# (disable: every call runs the host program; no prepared call is kept), `kernel_reuse` (disable:
# each input signature of a fusion gets a runtime of its own, even where the Kernel IR is the same).
FEATURE_NAMES = frozenset({"fast_math", "poison_outputs", "disk_cache", "host_jit", "simplify", "fast_call",
                           "kernel_reuse"})


def _flag(value: str | None, default: bool) -> bool:
    """An on/off knob: `0`, `false`, `off` and `no` turn it off; unset keeps the default."""
    if value is None or not value.strip():
        return default
    return value.strip().lower() not in ("0", "false", "off", "no")


def _byte_count(name: str, value: str | None, default: int) -> int:
    """A size knob: a number of bytes, or one with a K, M or G suffix (powers of 1024)."""
    if value is None or not value.strip():
        return default
    text = value.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    try:
        count = int(float(text[:-1] if scale > 1 else text) * scale)
    except ValueError:
        count = -1
    if count < 0:
        raise InputError(f"{name}: expected a number of bytes such as 1073741824 or 512M, got {value!r}")
    return count


def _names(value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class Config:
    """Every knob braze reads. Unknown dump names are kept, so a typo is visible in `braze info`."""

    dump: frozenset[str] = frozenset()
    enable: frozenset[str] = frozenset()
    disable: frozenset[str] = frozenset()
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "braze")
    cache_max_bytes: int = 1 << 30  # BRAZE_CACHE_MAX_BYTES (e.g. 512M): the disk cache evicts beyond it
    fuse_tasks: bool = True  # BRAZE_FUSE_TASKS=0: the task-fusion pass is off
    fuse_tasks_raw: bool = True  # BRAZE_FUSE_TASKS_RAW=0: only disjoint tasks fuse (no read-after-write rule)
    fuse_tasks_diag: bool = False  # BRAZE_FUSE_TASKS_DIAG=1: one line per task pair to stderr
    fuse_tasks_budget: int = 4000  # BRAZE_FUSE_TASKS_BUDGET: most Kernel IR nodes in a merged task body
    debug: bool = False  # BRAZE_DEBUG=1: every @bz.kernel checks its indices, as with debug=True

    @classmethod
    def from_environment(cls, env: dict[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        return cls(
            dump=_names(env.get("BRAZE_DUMP", "")),
            enable=_names(env.get("BRAZE_ENABLE", "")),
            disable=_names(env.get("BRAZE_DISABLE", "")),
            cache_dir=Path(env["BRAZE_CACHE_DIR"]) if env.get("BRAZE_CACHE_DIR") else cls().cache_dir,
            cache_max_bytes=_byte_count("BRAZE_CACHE_MAX_BYTES", env.get("BRAZE_CACHE_MAX_BYTES"), cls.cache_max_bytes),
            fuse_tasks=_flag(env.get("BRAZE_FUSE_TASKS"), True),
            fuse_tasks_raw=_flag(env.get("BRAZE_FUSE_TASKS_RAW"), True),
            fuse_tasks_diag=_flag(env.get("BRAZE_FUSE_TASKS_DIAG"), False),
            fuse_tasks_budget=int(env.get("BRAZE_FUSE_TASKS_BUDGET") or cls.fuse_tasks_budget),
            debug=_flag(env.get("BRAZE_DEBUG"), False),
        )


current: Config = Config.from_environment()


@contextmanager
def scope(**overrides) -> Iterator[Config]:
    """Overrides knobs for the `with` body (sets of names may be given as comma strings)."""
    global current
    previous = current
    fixed = {k: _names(v) if isinstance(v, str) and k != "cache_dir" else v for k, v in overrides.items()}
    current = replace(previous, **fixed)
    try:
        yield current
    finally:
        current = previous


def disabled(name: str) -> bool:
    """Whether `BRAZE_DISABLE` turns the feature `name` off."""
    return name in current.disable


def dumping(name: str) -> bool:
    """Whether `BRAZE_DUMP` asks for the dump `name`."""
    return name in current.dump


def diagnostic(line: str) -> None:
    """One line of a diagnostic stream (`BRAZE_FUSE_TASKS_DIAG`) to stderr."""
    sys.stderr.write(f"braze: {line}\n")


def dump(name: str, text: str) -> None:
    """Writes a named dump to the dump stream (stderr), framed so several dumps stay readable."""
    sys.stderr.write(f"===== braze dump: {name} =====\n{text}\n")
