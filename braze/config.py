"""Typed knobs, read from the environment once (DESIGN section 8). Tests override them with `scope`."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

DUMP_NAMES = frozenset({
    "fusion_ir", "segments", "scheduler_params", "kernel_ir", "cuda_kernel", "llvm_ir", "ptx",
    "launch_params", "kernel_args", "host_program", "host_jit", "fusion_decisions", "cuda_to_file",
})
# What BRAZE_ENABLE / BRAZE_DISABLE switch: `fast_math` (enable: fast-math flags in CPU kernels),
# `poison_outputs` (enable: new GPU outputs start as 0xFF bytes), `disk_cache` (disable: no
# compiled code read from or written to disk), `host_jit` (disable: shape functions run in
# Python instead of native code), `simplify` (disable: Kernel IR is not simplified).
FEATURE_NAMES = frozenset({"fast_math", "poison_outputs", "disk_cache", "host_jit", "simplify"})


def _names(value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class Config:
    """Every knob braze reads. Unknown dump names are kept, so a typo is visible in `braze info`."""

    dump: frozenset[str] = frozenset()
    enable: frozenset[str] = frozenset()
    disable: frozenset[str] = frozenset()
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "braze")

    @classmethod
    def from_environment(cls, env: dict[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        return cls(
            dump=_names(env.get("BRAZE_DUMP", "")),
            enable=_names(env.get("BRAZE_ENABLE", "")),
            disable=_names(env.get("BRAZE_DISABLE", "")),
            cache_dir=Path(env["BRAZE_CACHE_DIR"]) if env.get("BRAZE_CACHE_DIR") else cls().cache_dir,
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


def dump(name: str, text: str) -> None:
    """Writes a named dump to the dump stream (stderr), framed so several dumps stay readable."""
    sys.stderr.write(f"===== braze dump: {name} =====\n{text}\n")
