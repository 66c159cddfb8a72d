"""Typed knobs, read from the environment once (docs/architecture.md, "Knobs and dumps"). Tests override
them with `scope`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from braze.errors import InputError

# Each dump BRAZE_DUMP may name, and what it writes to the dump stream.
DUMPS = {
    "fusion_ir": "a fusion's IR, at its first call",
    "segments": "which tensors each fusion writes from its kernel, and why",
    "scheduler_params": "the heuristics each scheduler chose",
    "kernel_ir": "the Kernel IR of each kernel compiled",
    "cuda_kernel": "the CUDA C++ of each kernel compiled",
    "llvm_ir": "the optimized LLVM IR of each CPU kernel compiled",
    "ptx": "the PTX of each CUDA kernel compiled",
    "launch_params": "each task's index range and grid, at launches outside a cached call",
    "kernel_args": "the argument block of those launches, slot by slot",
    "host_program": "each fusion's host program (allocate, launch, alias, free)",
    "host_jit": "the LLVM IR of native host functions",
    "fusion_decisions": "task fusion's decision for each pair of loops of a @bz.kernel",
    "cuda_to_file": "the CUDA C++ of each kernel, into files under the cache folder's dump/",
}
# What BRAZE_ENABLE / BRAZE_DISABLE switch, and what each does when switched.
FEATURES = {
    "fast_math": "enable: fast-math flags in compiled kernels",
    "reverse_parallel": "enable: on the CPU, each parallel loop runs its indices in decreasing order on one thread, "
                        "so a kernel whose answer hangs on the order of its iterations (a race on a GPU) gives "
                        "another answer than in increasing order",
    "poison_outputs": "enable: new outputs start as 0xFF bytes (NaN, -1), so an element no kernel writes shows",
    "disk_cache": "disable: no compiled code is read from or written to disk",
    "host_jit": "disable: shape functions run in Python instead of native code",
    "simplify": "disable: Kernel IR is not simplified",
    "split_loops": "disable: loops are not split where a condition on their index changes (cat, pad)",
    "fast_call": "disable: every call runs the host program; no prepared call is kept",
    "kernel_reuse": "disable: each input signature of a fusion gets a runtime of its own",
    "fold_rows": "disable: a task writing rows another task reads (h = x + residual under a norm) stays a task "
                 "of its own",
    "narrow_math": "disable: on a GPU, a float32 rounded to bfloat16 or float16 computes exp and the logistic "
                   "functions (sigmoid, silu, tanh-GELU) correctly rounded, not approximately",
    "inner_outer": "disable: on a GPU, a column sum over a row task's space (a norm backward's dweight) is a "
                   "task of its own, not carried by the row task",
    "inner_outer_split": "disable: an inner-outer row task reads its column partial results through generic "
                         "pointers (shared memory or the workspace, chosen at run time) instead of one copy of its "
                         "rows for each",
    "inner_outer_registers": "disable: an inner-outer row task of 2-byte elements keeps one vector a row cache in "
                             "registers (4096-long bfloat16 rows then go through shared memory), not two",
    "inner_outer_occupancy": "disable: an inner-outer row task runs at most 2 blocks an SM instead of as many as fit "
                             "(up to 3)",
    "inner_outer_fold": "disable: the fold of an inner-outer task's partial results reads one column a thread, 32 "
                        "columns a block, instead of 16-byte vectors over enough blocks to fill the GPU",
    "dense_reductions": "disable: on a GPU, a full reduction over arrays dense in memory walks them an element "
                        "at a time as over any strides, not in 16-byte vectors into several accumulators",
    "fast_divisors": "disable: on a GPU, index arithmetic divides by extents with the hardware-less division, "
                     "not with a multiplier and shift computed once a thread",
    "shared_invariants": "disable: each loop of a task hoists its row invariants into Lets of its own, not reading "
                         "a value an earlier loop of the task hoisted",
    "vector_tails": "disable: on a GPU, a row loop takes its 16-byte vector path only for rows whose length the "
                    "vector divides, not for any length with a tail of single elements",
    "channel_rows": "disable: on a GPU, a normalization over several axes (batch_norm's N, H and W) whose rows "
                    "fit on chip is two tasks (the statistics, then the normalized output reading them), not one "
                    "task a channel computing both",
    "shared_blocks": "disable: on a GPU, a row of 1024 elements or more whose lanes combine values takes a "
                     "whole block, not as few warps as give each lane a dozen elements, rows sharing the block",
    "row_peel": "disable: on a GPU, a row loop whose rows start off a 16-byte boundary (rows of an odd length) "
                "walks them an element at a time, not as a head of single elements up to the boundary, vectors "
                "from there, then a tail",
    "uniform_alignment": "disable: on a GPU, the vector path of a row loop tests its arrays' alignment at every "
                         "row, not once a thread where the strides allow",
    "compile_ahead": "disable: the torch backend compiles each region's kernel at its first call, one after "
                     "another, not all of a graph's at once on worker threads when the graph is compiled",
    "split_programs": "disable: on a GPU, a kernel of many tasks compiles as one NVRTC program, not as several of "
                      "about 30 KB of CUDA each compiled side by side on worker threads",
    "split_functions": "disable: on a GPU, a row task's path for rows split across blocks is a branch of its row "
                       "function, not a function of its own (whose registers the row path then shares)",
    "joint_lane_reduce": "disable: on a GPU, each accumulator of a row is combined over a block's lanes with "
                         "barriers of its own, not all of them between one pair of barriers",
    "lane_scans": "disable: on a GPU, a scan (cumsum, cumprod, cummax, cummin) walks each row on one thread, not "
                  "a tile of the row at a time over its lanes",
    "scan_vectors": "disable: on a GPU, a scan's lanes load their runs of four 4-byte elements one at a time, not "
                    "as one 16-byte vector where the row allows",
    "scan_prefetch": "disable: on a GPU, a scan's row loads each tile's elements after the tile before is "
                     "stored, not during that tile's scan over the lanes",
    "flat_pointwise": "disable: on a GPU, a pointwise task over arrays all laid out row-major walks rows of its "
                      "innermost axis, not every axis as one flat range of 16-byte vectors",
    "l2_hints": "disable: on a GPU, a row task whose rows are too long for shared memory reads and writes them "
                "with no L2 eviction hints (the first read kept for the second, the last read and the stores "
                "evicted first)",
    "balanced_lanes": "disable: on a GPU, a pointwise task's rows of 1024 elements or more take a whole block "
                      "each, however many of its lanes the row's last step leaves idle",
    "narrow_blocks": "disable: on a GPU, many rows of 2-byte elements that a block of 256 keeps in registers run "
                     "on blocks of 256 threads, not of 128 keeping twice the elements a thread",
    "column_vectors": "disable: on a GPU, a column reduction over contiguous columns gives each thread one column "
                      "loaded an element a row, not 16 bytes of neighbouring columns loaded as one vector a row",
    "narrow_warps": "disable: on a GPU, a warp a row keeps room for its longest row in registers however short "
                    "the row, not a second function with half the room for rows that fit it",
    "divisor_rows": "disable: on a GPU, a row task computed element by element whose threads set up fast "
                    "divisors takes a row a thread, not enough rows to spread that setup over 64 elements",
    "pad_mm": "disable: the torch backend leaves matrix multiplies with extents that break 16-byte alignment "
              "(an odd vocabulary) unpadded, as eager PyTorch runs them",
    "logsumexp_pad": "disable: logsumexp over an axis whose extent is not a static positive number takes the max "
                     "of that axis as it is, not padded with one -inf (an empty axis is then an InputError, "
                     "not -inf as in torch)",
}
DUMP_NAMES = frozenset(DUMPS)
FEATURE_NAMES = frozenset(FEATURES)
# Each feature is switched by one variable only: `BRAZE_DISABLE=fast_math` would otherwise be a silent no-op.
ENABLE_NAMES = frozenset(name for name, text in FEATURES.items() if text.startswith("enable:"))
DISABLE_NAMES = FEATURE_NAMES - ENABLE_NAMES
_SWITCHED_BY = {name: "BRAZE_ENABLE" if name in ENABLE_NAMES else "BRAZE_DISABLE" for name in FEATURE_NAMES}


_ON, _OFF = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def _flag(name: str, value: str | None, default: bool) -> bool:
    """An on/off knob: `1`, `true`, `on`, `yes` or `0`, `false`, `off`, `no`; unset keeps the default.
    Anything else is an error: a typo (`flase`) must not leave the knob on."""
    if value is None or not value.strip():
        return default
    text = value.strip().lower()
    if text not in _ON + _OFF:
        raise InputError(f"{name}: expected 1 or 0 (or true/false, on/off, yes/no), got {value!r}")
    return text in _ON


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


def _count(name: str, value: str | None, default: int) -> int:
    if value is None or not value.strip():
        return default
    try:
        return int(value)
    except ValueError:
        raise InputError(f"{name}: expected a whole number, got {value!r}") from None


def _names(value: str) -> frozenset[str]:
    return frozenset(part.strip() for part in value.split(",") if part.strip())


def _known_names(knob: str, value: str | frozenset[str], known: frozenset[str]) -> frozenset[str]:
    """The names of a list knob, each one braze knows: a typo is an error, not a silent no-op."""
    names = _names(value) if isinstance(value, str) else frozenset(value)
    unknown = sorted(names - known)
    if unknown:
        other = [f"{name} is a feature of {_SWITCHED_BY[name]}" for name in unknown if name in _SWITCHED_BY]
        raise InputError(f"{knob}: unknown name(s) {', '.join(unknown)}; expected some of {', '.join(sorted(known))}"
                         + "".join(f" ({note})" for note in other))
    return names


@dataclass(frozen=True)
class Knob:
    """One environment variable braze reads: the Config field it sets, how its text is read, and help."""

    env: str
    field: str
    read: Callable[[str, str | None], object]  # (variable name, text or None) -> value
    help: str


def _list_of(known: frozenset[str]) -> Callable[[str, str | None], frozenset[str]]:
    return lambda env, text: _known_names(env, text or "", known)


def _switch(default: bool) -> Callable[[str, str | None], bool]:
    return lambda env, text: _flag(env, text, default)


@dataclass(frozen=True)
class Config:
    """Every knob braze reads (KNOBS says which variable sets which field)."""

    dump: frozenset[str] = frozenset()
    enable: frozenset[str] = frozenset()
    disable: frozenset[str] = frozenset()
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "braze")
    cache_max_bytes: int = 1 << 30
    fuse_tasks: bool = True
    fuse_tasks_raw: bool = True
    fuse_tasks_diag: bool = False
    fuse_tasks_budget: int = 4000
    kept_buffer_bytes: int = 256 << 20
    debug: bool = False

    @classmethod
    def from_environment(cls, env: dict[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        return cls(**{k.field: k.read(k.env, env.get(k.env)) for k in KNOBS if env.get(k.env) is not None})


_DEFAULTS = Config()
KNOBS: tuple[Knob, ...] = (
    Knob("BRAZE_DUMP", "dump", _list_of(DUMP_NAMES), "comma list of dumps to write to stderr: " + ", ".join(DUMPS)),
    Knob("BRAZE_ENABLE", "enable", _list_of(ENABLE_NAMES), "comma list of features to turn on (the features "
         "below)"),
    Knob("BRAZE_DISABLE", "disable", _list_of(DISABLE_NAMES), "comma list of features to turn off (the features "
         "below)"),
    Knob("BRAZE_CACHE_DIR", "cache_dir", lambda env, text: Path(text) if text else _DEFAULTS.cache_dir,
         "the disk cache's folder (default ~/.cache/braze)"),
    Knob("BRAZE_CACHE_MAX_BYTES", "cache_max_bytes", lambda env, text: _byte_count(env, text, 1 << 30),
         "the disk cache's size cap, e.g. 512M (default 1G); least recently used entries go first"),
    Knob("BRAZE_FUSE_TASKS", "fuse_tasks", _switch(True), "0: the task-fusion pass is off"),
    Knob("BRAZE_FUSE_TASKS_RAW", "fuse_tasks_raw", _switch(True),
         "0: only disjoint loops fuse (no same-thread read-after-write rule)"),
    Knob("BRAZE_FUSE_TASKS_DIAG", "fuse_tasks_diag", _switch(False), "1: one line per pair of loops to stderr"),
    Knob("BRAZE_FUSE_TASKS_BUDGET", "fuse_tasks_budget", lambda env, text: _count(env, text, 4000),
         "the most Kernel IR nodes in a merged loop body (default 4000)"),
    Knob("BRAZE_KEPT_BUFFER_BYTES", "kept_buffer_bytes", lambda env, text: _byte_count(env, text, 256 << 20),
         "the most bytes of intermediates and hidden outputs cached calls keep between calls, over the whole "
         "process (default 256M); the least recently used call gives its buffers up first"),
    Knob("BRAZE_DEBUG", "debug", _switch(False), "1: every @bz.kernel checks its indices, as with debug=True"),
)
_CHECKED_LISTS = {"dump": DUMP_NAMES, "enable": ENABLE_NAMES, "disable": DISABLE_NAMES}


current: Config = Config.from_environment()


@contextmanager
def scope(**overrides) -> Iterator[Config]:
    """Overrides knobs for the `with` body (lists of names may be given as comma strings)."""
    global current
    previous = current
    fixed = {k: _known_names(k, v, _CHECKED_LISTS[k]) if k in _CHECKED_LISTS else v for k, v in overrides.items()}
    current = replace(previous, **fixed)
    try:
        yield current
    finally:
        current = previous


def code_knobs() -> tuple:
    """The knobs that change the code braze makes for a call, or how it runs it: the features switched
    and task fusion's settings. Caches of compiled calls in memory key on them, so a knob changed
    between two calls (`scope`) takes effect at the second."""
    knobs = current
    return knobs.enable, knobs.disable, knobs.fuse_tasks, knobs.fuse_tasks_raw, knobs.fuse_tasks_budget, knobs.debug


def _feature(name: str, known: frozenset[str], knob: str) -> str:
    if name not in known:
        raise ValueError(f"unknown feature {name!r} of {knob}; its features are {', '.join(sorted(known))}")
    return name


def enabled(name: str) -> bool:
    """Whether `BRAZE_ENABLE` turns the feature `name` on."""
    return _feature(name, ENABLE_NAMES, "BRAZE_ENABLE") in current.enable


def disabled(name: str) -> bool:
    """Whether `BRAZE_DISABLE` turns the feature `name` off."""
    return _feature(name, DISABLE_NAMES, "BRAZE_DISABLE") in current.disable


def dumping(name: str) -> bool:
    """Whether `BRAZE_DUMP` asks for the dump `name`."""
    if name not in DUMP_NAMES:
        raise ValueError(f"unknown dump {name!r}; the dumps are {', '.join(sorted(DUMP_NAMES))}")
    return name in current.dump


def diagnostic(line: str) -> None:
    """One line of a diagnostic stream (`BRAZE_FUSE_TASKS_DIAG`) to stderr."""
    sys.stderr.write(f"braze: {line}\n")


def dump(name: str, text: str) -> None:
    """Writes a named dump to the dump stream (stderr), framed so several dumps stay readable."""
    sys.stderr.write(f"===== braze dump: {name} =====\n{text}\n")
