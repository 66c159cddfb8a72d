"""GPU experiment: variants of braze's generated normalization kernels (softmax, layer_norm,
rms_norm of benchmarks/gpu.py) and hand-written reference kernels, all timed in one run against
the copy ceiling and torch.compile.

    PYTHONPATH=. python3 benchmarks/norm_variants.py            # on the GPU machine (< 5 min)
    .venv/bin/python benchmarks/norm_variants.py --compile-only  # no GPU: NVRTC builds every variant

Each braze variant is the fusion's own generated CUDA (the source braze's executor compiled), with
an optional textual edit, a different block size (the source regenerated for it), and/or a launch
override (lanes, grid, row cache, resident-block cap), launched here with the very argument block
and launch scalars braze's executor used. The reference kernels are simple persistent-row designs:
one block per row, the row loaded once into registers with 16-byte loads issued before any use.

Every variant: output poisoned with NaN, run, checked against a float64 torch reference (error =
max|out - ref| / max|ref|; < 1e-5 for float32, < 1e-2 for bfloat16; no NaN left), then timed with
CUDA events: median of 30 calls after warm-up, alternating two input sets (and two outputs) so L2
does not serve the data, each call queued behind a short GPU sleep so host launch cost is not timed.
GB/s = (bytes read + bytes written once) / time. Prints a table last; writes $OUT/norm_variants.json.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import re
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from braze import config, engine
from braze.codegen import cuda as cuda_codegen
from braze.errors import CompileError
from braze.runtime import nvrtc
from braze.runtime.cuda_kernel import BLOCKS_PER_SM, ROW_CACHE_BYTES, lanes_for

COMPILE_ONLY = "--compile-only" in sys.argv
STARTED = time.perf_counter()
BUDGET_S = 255  # after this, what is left (torch.compile first) is skipped, so the run ends < 5 min
REPS, WARMUP, SETS = 30, 3, 2
SLEEP_CYCLES = 300_000  # ~160 us on an H100: the host queues the timed call while the GPU sleeps


def elapsed() -> float:
    return time.perf_counter() - STARTED


def log(msg: str) -> None:
    print(f"[{elapsed():6.1f}s] {msg}", flush=True)


# --- the workloads: the same fusions as benchmarks/gpu.py -----------------------------------------
def fusion_builders() -> dict[str, Callable]:
    """The builders of benchmarks/gpu_fusions.py, shared with gpu.py."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_fusions  # noqa: PLC0415

    return {"softmax": gpu_fusions.softmax_fusion, "layer_norm": gpu_fusions.layer_norm_fusion,
            "rms_norm": gpu_fusions.rms_norm_fusion}


@dataclasses.dataclass
class Workload:
    key: str
    title: str
    rows: int
    cols: int
    dtype: str  # "float32" or "bfloat16"
    weights: int  # 1-D inputs of length cols after x
    eps: float
    tolerance: float

    @property
    def itemsize(self) -> int:
        return 4 if self.dtype == "float32" else 2

    @property
    def nbytes(self) -> int:  # x read once, out written once (as gpu.py counts)
        return 2 * self.rows * self.cols * self.itemsize


WORKLOADS = [
    Workload("softmax", "softmax [4096,8192] f32", 4096, 8192, "float32", 0, 0.0, 1e-5),
    Workload("layer_norm", "layer_norm [8192,4096] f32", 8192, 4096, "float32", 2, 1e-5, 1e-5),
    Workload("rms_norm", "rms_norm [8192,4096] bf16", 8192, 4096, "bfloat16", 1, 1e-6, 1e-2),
]


# --- the variants of braze's generated kernels ------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Ctx:
    """What a source edit may depend on: the row length and the launch's lanes and block."""
    cols: int
    lanes: int
    block: int


_VECTOR_LOOP = re.compile(r"^(\s*)(for \((?:int|long long) \w+_4 = 4 \* lane;)", re.M)


def _sub(pattern, repl, text, what: str, flags=0, count_at_least: int = 1):
    new, n = re.subn(pattern, repl, text, flags=flags)
    if n < count_at_least:
        raise EditError(f"{what}: pattern {pattern!r} matched {n} times (expected >= {count_at_least})")
    return new


class EditError(Exception):
    pass


def edit_unroll(n: int):
    def edit(src: str, ctx: Ctx) -> str:
        return _sub(_VECTOR_LOOP, rf"\1#pragma unroll {n}\n\1\2", src, f"unroll{n}")
    edit.__name__ = f"unroll{n}"
    return edit


_STREAM_HELPERS = r"""
// norm_variants: streaming (evict-first) 8- and 16-byte global accesses
template <typename V> __device__ __forceinline__ V nv_ldcs(const void* p) {
  static_assert(sizeof(V) == 16 || sizeof(V) == 8, "8 or 16 bytes");
  if constexpr (sizeof(V) == 16) {
    float4 r = __ldcs(reinterpret_cast<const float4*>(p));
    return *reinterpret_cast<V*>(&r);
  }
  else { uint2 r = __ldcs(reinterpret_cast<const uint2*>(p)); return *reinterpret_cast<V*>(&r); }
}
template <typename V> __device__ __forceinline__ void nv_stcs(void* p, const V& v) {
  static_assert(sizeof(V) == 16 || sizeof(V) == 8, "8 or 16 bytes");
  if constexpr (sizeof(V) == 16) __stcs(reinterpret_cast<float4*>(p), *reinterpret_cast<const float4*>(&v));
  else __stcs(reinterpret_cast<uint2*>(p), *reinterpret_cast<const uint2*>(&v));
}
"""


def _insert_helpers(src: str, helpers: str) -> str:
    at = src.find('extern "C"')
    if at < 0:
        raise EditError('no extern "C" kernel in the source')
    return src[:at] + helpers + "\n" + src[at:]


def edit_stream(src: str, ctx: Ctx) -> str:
    """Row loads (`&Tn_[i2 * Tn_st0 + ...]`) through __ldcs, row stores through __stcs; the weights'
    loads (the same for every row) keep the default caching."""
    src = _sub(r"\*reinterpret_cast<const (\w+)\*>\(&(T\d+_)\[(i2 \* T\d+_st0 \+ \w+)\]\)",
               r"nv_ldcs<\1>(&\2[\3])", src, "stream loads")
    src = _sub(r"\*reinterpret_cast<(\w+)\*>\(&(T\d+_)\[([^\]]+)\]\) = (\w+);", r"nv_stcs<\1>(&\2[\3], \4);",
               src, "stream stores")
    return _insert_helpers(src, _STREAM_HELPERS)


def edit_min_blocks(n: int):
    def edit(src: str, ctx: Ctx) -> str:
        return _sub(r"__launch_bounds__\((\d+)\)", rf"__launch_bounds__(\1, {n})", src, f"min blocks {n}")
    edit.__name__ = f"min_blocks{n}"
    return edit


def edit_fast_exp(src: str, ctx: Ctx) -> str:
    return _sub(r"(?<![\w.])expf\(", "__expf(", src, "fast exp")


def edit_registers(src: str, ctx: Ctx) -> str:
    """The row cache in registers: every 16-byte (8 for bf16) loop runs a fixed count RK of
    iterations (fully unrolled, an early exit for shorter rows), and `row_cacheN[X_4]` becomes
    `bz_rcN[X_k]`, a register array, since iteration k of every loop touches the same elements.
    The scalar (unaligned) path then rereads memory instead of the shared cache."""
    rk = -(-ctx.cols // (4 * ctx.lanes))
    def loop(m: re.Match) -> str:
        itype, var, limit = m.group(1), m.group(2), m.group(3)
        return (f"#pragma unroll\n for (int {var}_k = 0; {var}_k < {rk}; ++{var}_k) {{ "
                f"const {itype} {var}_4 = 4 * lane + {var}_k * (4 * lanes32); if ({var}_4 >= ({limit})) break;")
    src = _sub(r"for \((int|long long) (\w+)_4 = 4 \* lane; \2_4 < ([^;]+); \2_4 \+= 4 \* lanes32\) \{",
               loop, src, "registers: loops")
    types: dict[str, str] = {}

    def access(m: re.Match) -> str:
        types.setdefault(m.group(2), m.group(1))
        if types[m.group(2)] != m.group(1):
            raise EditError(f"row_cache{m.group(2)} read as {types[m.group(2)]} and {m.group(1)}")
        return f"bz_rc{m.group(2)}[{m.group(3)}_k]"
    src, n = re.subn(r"\*reinterpret_cast<(\w+)\*>\(&row_cache(\d+)\[(\w+)_4\]\)", access, src)
    if n < 2:
        raise EditError(f"registers: {n} vector row-cache accesses")
    for index, vtype in types.items():
        src = _sub(rf"(\n(\s*)[^\n]*\* const row_cache{index} = [^\n]*;)", rf"\1\n\2{vtype} bz_rc{index}[{rk}];",
                   src, "registers: declaration")
    src = _sub(r"if \(cached_row\) row_cache", "if (false) row_cache", src, "registers: scalar stores",
               count_at_least=0)
    src = _sub(r"cached_row \? row_cache", "false ? row_cache", src, "registers: scalar loads", count_at_least=0)
    if re.search(r"reinterpret_cast<\w+\*>\(&row_cache", src):
        raise EditError("registers: a vector row-cache access is left")
    return src


def edit_register_vectors(n: int):
    """The register-row copy with n vectors a thread (braze picks REGISTER_ROW_BYTES' worth)."""
    def edit(src: str, ctx: Ctx) -> str:
        m = re.search(r"bz_rc0\[(\d+)\];", src)
        if not m:
            raise EditError("no register row")
        old = int(m.group(1))
        src = _sub(rf"bz_rc(\d)\[{old}\];", rf"bz_rc\1[{n}];", src, "register arrays")
        src = _sub(rf"(\w+_k) < {old};", rf"\1 < {n};", src, "register loops")
        cap = 4 * old * ctx.block
        return _sub(rf"<= {cap}\)", f"<= {4 * n * ctx.block})", src, "register capacity")
    edit.__name__ = f"register_vectors{n}"
    return edit


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    what: str
    edits: tuple = ()  # source edits (src, Ctx) -> src; each must change the text
    block: int = cuda_codegen.DEFAULT_BLOCK_SIZE  # threads per block; the source is regenerated for it
    lanes: int | None = None  # threads per row (<= 32 or == block); None: braze's lanes_for
    blocks_per_sm: int = BLOCKS_PER_SM  # cap on resident blocks sizing the persistent grid
    grid: str = "persistent"  # "rows": one block per row group (the grid-stride loop runs once)
    cache: bool = True  # False: no shared row cache (later loops read memory again, mostly L2)
    registers: bool = False  # the row cache in registers (needs edit_registers)
    options: tuple[str, ...] = ()  # extra NVRTC options
    only: tuple[str, ...] = ()  # workload keys (empty: all)
    predict: str = ""


VARIANTS = [
    Variant("base", "braze as generated, braze's launch plan", predict="= last run: 72% / 81% / 65% of copy"),
    Variant("unroll2", "#pragma unroll 2 on every 16-byte loop", (edit_unroll(2),), predict="+0-3%"),
    Variant("unroll4", "#pragma unroll 4 on every 16-byte loop", (edit_unroll(4),),
            predict="+0-5% (nvcc may already unroll by 4)"),
    Variant("unroll8", "#pragma unroll 8 on every 16-byte loop", (edit_unroll(8),),
            predict="softmax +3-8% (8 vectors a thread); others ~ unroll4"),
    Variant("stream", "row loads __ldcs, row stores __stcs (evict-first)", (edit_stream,), predict="+0-3%"),
    Variant("rows_grid", "grid = one block per row (no persistent grid-stride loop)", grid="rows",
            predict="softmax +5-10% (no 5.2-of-6 wave tail); layer/rms +0-4%"),
    Variant("nocache", "no shared row cache: later loops reread the row (L2 hits)", cache=False,
            predict="softmax -10-20% (exp twice, 3 reads); layer_norm -5%; rms_norm +-5% (more blocks)"),
    Variant("regs", "row cache in registers (fixed trip count, fully unrolled), no shared memory",
            (edit_registers,), registers=True, predict="+5-15%: all loads of a row in flight, no smem traffic"),
    Variant("regs_rows", "regs + one block per row", (edit_registers,), registers=True, grid="rows",
            predict="best generated variant: softmax ~85%, layer_norm ~88%, rms ~80%"),
    Variant("regs_rows_stream", "regs + one block per row + __ldcs/__stcs", (edit_registers, edit_stream),
            registers=True, grid="rows", predict="~ regs_rows, +0-2%"),
    Variant("block128", "128 threads a block (lanes = block), cap 8 blocks/SM", block=128,
            predict="-10-30%: at most 1024 threads an SM"),
    Variant("block128_bps16", "128 threads a block, cap 16 blocks/SM", block=128, blocks_per_sm=16,
            predict="~ base +-5%"),
    Variant("block512", "512 threads a block (lanes = block)", block=512, predict="+0-5% softmax; ~ others"),
    Variant("block1024", "1024 threads a block (lanes = block)", block=1024, predict="-0-10% (syncs over 32 warps)"),
    Variant("regs_rows_mb3", "regs_rows + __launch_bounds__(256, 3) (<= 85 registers: 3 blocks an SM)",
            (edit_registers, edit_min_blocks(3)), registers=True, grid="rows", only=("softmax",),
            predict="~ regs_rows +0-5%"),
    Variant("regs_rows_mb4", "regs_rows + __launch_bounds__(256, 4) (<= 64 registers: 4 blocks an SM)",
            (edit_registers, edit_min_blocks(4)), registers=True, grid="rows",
            predict="softmax +-5% vs regs_rows (may spill); rms: no spill at 64 regs, ~ regs_rows +0-3%"),
    Variant("mb6", "base + __launch_bounds__(256, 6) (<= 40 registers)", (edit_min_blocks(6),),
            only=("layer_norm", "rms_norm"), predict="+0-5% (more blocks resident)"),
    Variant("regs_rows_mb6", "regs_rows + __launch_bounds__(256, 6)", (edit_registers, edit_min_blocks(6)),
            registers=True, grid="rows", only=("layer_norm", "rms_norm"), predict="~ regs_rows +0-5%"),
    Variant("regs_block512_rows", "512 threads a block, row in registers, one block per row",
            (edit_registers,), block=512, registers=True, grid="rows", predict="~ regs_rows"),
    Variant("warp_row", "a warp per row (lanes = 32, 8 rows a block): shuffle reductions, no __syncthreads",
            lanes=32, predict="-10-40%: 128 B/lane in flight per pass; smem cache only for rms (64 KB)"),
    Variant("warp_row_regs", "a warp per row, row in registers (128 values a lane for 4096 columns)",
            (edit_registers,), lanes=32, registers=True, only=("layer_norm", "rms_norm"),
            predict="rms ~ base or better, layer_norm spills or low occupancy"),
    Variant("rk8", "register row of 8 vectors a thread", (edit_register_vectors(8),), only=("rms_norm",)),
    Variant("rk16", "register row of 16 vectors a thread", (edit_register_vectors(16),), only=("rms_norm",)),
    Variant("mb5", "base + __launch_bounds__(256, 5) (<= 48 registers)", (edit_min_blocks(5),)),
    Variant("rk8_mb5", "rk8 + __launch_bounds__(256, 5)", (edit_register_vectors(8), edit_min_blocks(5)),
            only=("rms_norm",)),
    Variant("rk8_block128", "rk8, 128 threads a block", (edit_register_vectors(8),), block=128,
            only=("rms_norm",)),
    Variant("fmad", "--fmad=true (braze compiles with --fmad=false)", options=("--fmad=true",),
            predict="+0-2% (compute is not the limit)"),
    Variant("fast_exp", "__expf instead of expf", (edit_fast_exp,), only=("softmax",),
            predict="+0-4%; error ~1e-6, passes"),
]


def applies(variant: Variant, workload: Workload) -> bool:
    return not variant.only or workload.key in variant.only


def variant_lanes(variant: Variant, workload: Workload) -> int:
    return variant.lanes or lanes_for(workload.cols, variant.block)


def variant_source(variant: Variant, workload: Workload, kernel) -> str:
    """The variant's CUDA source: regenerated for its block size, then its edits, each asserted to
    change the text."""
    src = cuda_codegen.generate(kernel, variant.block, restrict=True).text
    ctx = Ctx(workload.cols, variant_lanes(variant, workload), variant.block)
    for edit in variant.edits:
        new = edit(src, ctx)
        if new == src:
            raise EditError(f"edit {edit.__name__} changed nothing")
        src = new
    return src


def variant_options(variant: Variant) -> tuple[str, ...]:
    # As braze's default_params: registers as many as let one block fit on an SM, at most 255.
    return (f"--maxrregcount={min(255, 65536 // variant.block)}", *variant.options)


def plan_variant(v: Variant, task, scalars: dict, resident_blocks: Callable[[int], int], sm_count: int) -> dict:
    """The launch of braze's executor (CudaExecutor._plan_task) with the variant's overrides."""
    begin, end, *extents = task.bounds(scalars)
    lanes = (v.lanes or lanes_for(max(extents, default=1), v.block)) if task.uses_lanes else 1
    cached = max((extents[i] for i in task.cache_loops), default=0)
    shared = task.shared_bytes(v.block // lanes, cached)
    if shared > ROW_CACHE_BYTES or not v.cache or v.registers:
        shared = 0
    cached_arg = cached if (shared or v.registers) else 0
    resident = max(1, min(v.blocks_per_sm, resident_blocks(shared)))
    row_blocks = -(-(end - begin) * lanes // v.block)
    grid = row_blocks if v.grid == "rows" else min(row_blocks, sm_count * resident)
    if getattr(task, "register_row", 0) and not v.registers:
        # A task with a register-row copy has no grid-stride loop: one block per row group, and no
        # shared memory when the row fits in registers (CudaExecutor._plan_register_task).
        grid = row_blocks
        if lanes == v.block and cached <= task.register_row * v.block // cuda_codegen.DEFAULT_BLOCK_SIZE:
            shared, cached_arg = 0, 0
    return dict(grid=grid, block=v.block, lanes=lanes, shared=shared, cached_row=cached_arg, resident=resident)


# --- hand-written reference kernels ------------------------------------------------------------------
REF_COMMON = r"""
#define NV_NEG_INF (-__int_as_float(0x7f800000))
__device__ __forceinline__ float nv_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float nv_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Every thread gets the block's total. `red` must not be reused before another __syncthreads.
template <int THREADS, bool MAX> __device__ __forceinline__ float nv_block_reduce(float v, float* red) {
  v = MAX ? nv_warp_max(v) : nv_warp_sum(v);
  if (THREADS == 32) return v;
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < THREADS / 32 ? red[threadIdx.x & 31] : (MAX ? NV_NEG_INF : 0.f);
  return MAX ? nv_warp_max(v) : nv_warp_sum(v);
}
template <bool STREAM, typename V> __device__ __forceinline__ V nv_load(const V* p) {
  if constexpr (STREAM) return __ldcs(p); else return __ldg(p);
}
template <bool STREAM, typename V> __device__ __forceinline__ void nv_store(V* p, V v) {
  if constexpr (STREAM) __stcs(p, v); else *p = v;
}
"""

REF_SOFTMAX = r"""
// One block per row (grid-stride over rows): the row in registers, 16-byte loads all issued first.
template <int THREADS, int VPT, bool STREAM>
__device__ __forceinline__ void ref_softmax(const float4* __restrict__ x, float4* __restrict__ y, int rows) {
  constexpr int C4 = THREADS * VPT;  // float4s a row
  __shared__ float red0[32], red1[32];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const float4* xr = x + (long long)row * C4;
    float4* yr = y + (long long)row * C4;
    float4 v[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) v[i] = nv_load<STREAM>(xr + threadIdx.x + i * THREADS);
    float m = NV_NEG_INF;
#pragma unroll
    for (int i = 0; i < VPT; ++i) m = fmaxf(m, fmaxf(fmaxf(v[i].x, v[i].y), fmaxf(v[i].z, v[i].w)));
    m = nv_block_reduce<THREADS, true>(m, red0);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      v[i].x = expf(v[i].x - m); v[i].y = expf(v[i].y - m); v[i].z = expf(v[i].z - m); v[i].w = expf(v[i].w - m);
      s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
    }
    s = nv_block_reduce<THREADS, false>(s, red1);
    const float r = 1.f / s;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      float4 o = make_float4(v[i].x * r, v[i].y * r, v[i].z * r, v[i].w * r);
      nv_store<STREAM>(yr + threadIdx.x + i * THREADS, o);
    }
  }
}
"""

REF_LAYER_NORM = r"""
template <int THREADS, int VPT, bool STREAM>
__device__ __forceinline__ void ref_layer_norm(const float4* __restrict__ x, const float4* __restrict__ w,
                                               const float4* __restrict__ b, float4* __restrict__ y, int rows,
                                               float eps) {
  constexpr int C4 = THREADS * VPT;
  constexpr float inv_cols = 1.f / (4 * C4);
  __shared__ float red0[32], red1[32];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const float4* xr = x + (long long)row * C4;
    float4* yr = y + (long long)row * C4;
    float4 v[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) v[i] = nv_load<STREAM>(xr + threadIdx.x + i * THREADS);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
    const float mean = nv_block_reduce<THREADS, false>(s, red0) * inv_cols;
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      v[i].x -= mean; v[i].y -= mean; v[i].z -= mean; v[i].w -= mean;
      q += (v[i].x * v[i].x + v[i].y * v[i].y) + (v[i].z * v[i].z + v[i].w * v[i].w);
    }
    const float rstd = rsqrtf(nv_block_reduce<THREADS, false>(q, red1) * inv_cols + eps);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const float4 g = __ldg(w + threadIdx.x + i * THREADS), h = __ldg(b + threadIdx.x + i * THREADS);
      float4 o = make_float4(v[i].x * rstd * g.x + h.x, v[i].y * rstd * g.y + h.y,
                             v[i].z * rstd * g.z + h.z, v[i].w * rstd * g.w + h.w);
      nv_store<STREAM>(yr + threadIdx.x + i * THREADS, o);
    }
  }
}
"""

REF_RMS_NORM = r"""
// bfloat16 as raw bits: a float's upper half; rounding to nearest even going back.
__device__ __forceinline__ float nv_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float nv_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ unsigned nv_bf16(float f) {
  const unsigned u = __float_as_uint(f);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ void nv_words(const uint4& v, unsigned* w) {
  w[0] = v.x; w[1] = v.y; w[2] = v.z; w[3] = v.w;
}
__device__ __forceinline__ void nv_words(const uint2& v, unsigned* w) { w[0] = v.x; w[1] = v.y; }
__device__ __forceinline__ void nv_pack(const unsigned* w, uint4& v) { v = make_uint4(w[0], w[1], w[2], w[3]); }
__device__ __forceinline__ void nv_pack(const unsigned* w, uint2& v) { v = make_uint2(w[0], w[1]); }

// V: uint4 (8 bfloat16, 16 bytes) or uint2 (4 bfloat16, 8 bytes, as braze's vectors).
template <int THREADS, int VPT, typename V, bool STREAM>
__device__ __forceinline__ void ref_rms_norm(const V* __restrict__ x, const V* __restrict__ w, V* __restrict__ y,
                                             int rows, float eps) {
  constexpr int WORDS = sizeof(V) / 4, CV = THREADS * VPT;
  constexpr float inv_cols = 1.f / (2 * WORDS * CV);
  __shared__ float red[2][32];  // by row parity: the next row's reduction never overwrites a slot being read
  for (int row = blockIdx.x, parity = 0; row < rows; row += gridDim.x, parity ^= 1) {
    const V* xr = x + (long long)row * CV;
    V* yr = y + (long long)row * CV;
    V v[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) v[i] = nv_load<STREAM>(xr + threadIdx.x + i * THREADS);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      unsigned u[WORDS];
      nv_words(v[i], u);
#pragma unroll
      for (int k = 0; k < WORDS; ++k) s += nv_lo(u[k]) * nv_lo(u[k]) + nv_hi(u[k]) * nv_hi(u[k]);
    }
    const float r = rsqrtf(nv_block_reduce<THREADS, false>(s, red[parity]) * inv_cols + eps);
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      unsigned u[WORDS], g[WORDS], o[WORDS];
      nv_words(v[i], u);
      nv_words(__ldg(w + threadIdx.x + i * THREADS), g);
#pragma unroll
      for (int k = 0; k < WORDS; ++k)
        o[k] = nv_bf16(nv_lo(u[k]) * r * nv_lo(g[k])) | (nv_bf16(nv_hi(u[k]) * r * nv_hi(g[k])) << 16);
      V out;
      nv_pack(o, out);
      nv_store<STREAM>(yr + threadIdx.x + i * THREADS, out);
    }
  }
}
"""


@dataclasses.dataclass(frozen=True)
class RefKernel:
    name: str
    what: str
    threads: int
    grid: str = "rows"  # or "persistent": SMs x resident blocks, grid-stride over rows
    predict: str = ""

    @property
    def label(self) -> str:
        return self.name + ("_persistent" if self.grid == "persistent" else "")


def ref_kernels(w: Workload) -> tuple[str, list[RefKernel]]:
    """The reference source for a workload's shape and its kernels (extern "C" wrappers)."""
    wrappers, kernels = [], []

    def add(name, threads, call, params, what, grid="rows", predict=""):
        wrappers.append(f'extern "C" __global__ void __launch_bounds__({threads}) {name}({params}) {{ {call}; }}')
        kernels.append(RefKernel(name, what, threads, grid, predict))

    if w.key == "softmax":
        body, c4 = REF_SOFTMAX, w.cols // 4
        params = "const float4* x, float4* y, int rows"
        for t in (256, 512, 1024):
            add(f"ref_softmax_{t}", t, f"ref_softmax<{t}, {c4 // t}, false>(x, y, rows)", params,
                f"block {t}, {c4 // t} float4 a thread", predict="~88-92% of copy" if t == 256 else "~ ref 256")
        add("ref_softmax_256_stream", 256, f"ref_softmax<256, {c4 // 256}, true>(x, y, rows)", params,
            "block 256, __ldcs/__stcs", predict="~ ref 256 +0-2%")
        kernels.append(RefKernel("ref_softmax_256", "block 256, persistent grid (SMs x resident)", 256,
                                 "persistent", "~ ref 256 -0-5% (wave tail)"))
    elif w.key == "layer_norm":
        body, c4 = REF_LAYER_NORM, w.cols // 4
        params = "const float4* x, const float4* w, const float4* b, float4* y, int rows, float eps"
        for t in (128, 256, 512):
            add(f"ref_layer_norm_{t}", t, f"ref_layer_norm<{t}, {c4 // t}, false>(x, w, b, y, rows, eps)", params,
                f"block {t}, {c4 // t} float4 a thread", predict="~88-92% of copy")
        add("ref_layer_norm_256_stream", 256, f"ref_layer_norm<256, {c4 // 256}, true>(x, w, b, y, rows, eps)",
            params, "block 256, __ldcs/__stcs", predict="~ ref 256 +0-2%")
        kernels.append(RefKernel("ref_layer_norm_256", "block 256, persistent grid", 256, "persistent",
                                 "~ ref 256"))
    else:
        body, c8 = REF_RMS_NORM, w.cols // 8
        for t in (128, 256, 512):
            add(f"ref_rms_norm_{t}", t, f"ref_rms_norm<{t}, {c8 // t}, uint4, false>(x, w, y, rows, eps)",
                "const uint4* x, const uint4* w, uint4* y, int rows, float eps",
                f"block {t}, {c8 // t} x 16-byte (8 bf16) a thread", predict="~85-90% of copy")
        add("ref_rms_norm_256_8byte", 256, f"ref_rms_norm<256, {2 * c8 // 256}, uint2, false>(x, w, y, rows, eps)",
            "const uint2* x, const uint2* w, uint2* y, int rows, float eps",
            "block 256, 8-byte (4 bf16) loads as braze's vectors", predict="~ ref 256 -0-5%")
        add("ref_rms_norm_256_stream", 256, f"ref_rms_norm<256, {c8 // 256}, uint4, true>(x, w, y, rows, eps)",
            "const uint4* x, const uint4* w, uint4* y, int rows, float eps", "block 256, __ldcs/__stcs",
            predict="~ ref 256 +0-2%")
        kernels.append(RefKernel("ref_rms_norm_256", "block 256, persistent grid", 256, "persistent", "~ ref 256"))
    return REF_COMMON + body + "\n" + "\n".join(wrappers) + "\n", kernels


# --- compiling, with ptxas's register and spill report --------------------------------------------
class _LogTap:
    """Wraps cuda.bindings.nvrtc so braze's own compile (its exact flags) keeps the program log of
    successful compiles too (ptxas -v: registers, spills), per thread."""

    def __init__(self, real) -> None:
        self.real, self.local = real, threading.local()

    def __getattr__(self, name):
        return getattr(self.real, name)

    def nvrtcDestroyProgram(self, program):  # noqa: N802
        try:
            _, size = self.real.nvrtcGetProgramLogSize(program)
            buf = b" " * size
            self.real.nvrtcGetProgramLog(program, buf)
            self.local.log = buf.rstrip(b"\0").decode(errors="replace")
        except Exception:  # noqa: BLE001
            self.local.log = ""
        return self.real.nvrtcDestroyProgram(program)


_TAP: _LogTap | None = None


def install_log_tap() -> _LogTap:
    """Once, before any compile thread starts (the experiment's own tap; braze is unchanged)."""
    global _TAP
    if _TAP is None:
        _TAP = _LogTap(nvrtc._nvrtc())  # noqa: SLF001
        nvrtc._nvrtc = lambda: _TAP  # noqa: SLF001
    return _TAP


def compile_logged(source: str, name: str, arch: str, options: tuple[str, ...]) -> dict:
    """{"cubin", "seconds", "ptxas" {function: (registers, spill bytes)}} or {"error", "log_head"}."""
    tap = install_log_tap()
    tap.local.log = ""
    t0 = time.perf_counter()
    try:
        cubin = nvrtc.compile_cubin(source, name, arch, (*options, "--ptxas-options=-v"))
    except CompileError as e:
        return {"error": "compile failed", "log_head": "\n".join(str(e).splitlines()[:12]),
                "seconds": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"[:500], "log_head": "", "seconds": time.perf_counter() - t0}
    return {"cubin": cubin, "seconds": time.perf_counter() - t0, "ptxas": _ptxas_info(tap.local.log)}


def _ptxas_info(text: str) -> dict:
    info, current = {}, None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = m.group(1)
            info[current] = {"registers": None, "spill_bytes": 0}
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current:
            info[current]["spill_bytes"] = int(m.group(1)) + int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m and current:
            info[current]["registers"] = int(m.group(1))
    return info


# --- planning (what the sources are built for) --------------------------------------------------------
@dataclasses.dataclass
class Built:
    """One compiled variant (or its failure)."""
    workload: Workload
    variant: Variant | RefKernel
    kind: str  # "braze" or "ref"
    source: str | None = None
    compiled: dict | None = None
    error: str | None = None
    log_head: str = ""


def host_inputs(w: Workload) -> list[np.ndarray]:
    if w.dtype == "float32":
        x, vec = np.zeros((w.rows, w.cols), np.float32), np.zeros(w.cols, np.float32)
    else:
        import ml_dtypes  # noqa: PLC0415
        x, vec = np.zeros((w.rows, w.cols), ml_dtypes.bfloat16), np.zeros(w.cols, ml_dtypes.bfloat16)
    return [x] + [vec.copy() for _ in range(w.weights)]


def kernel_for(fusion, inputs):
    """The Kernel IR braze builds for these inputs (as engine.cuda_source and compile_fusion_cuda)."""
    bound = engine.bind_inputs(fusion, inputs)
    _, kernel, _ = engine.plan_kernel(fusion, engine.signature(fusion, bound), views_on_host=False)
    return kernel


def build_all(kernels: dict[str, object], arch: str, threads: int) -> list[Built]:
    """Every variant's source (edits applied) and NVRTC compile, in parallel."""
    jobs: list[Built] = []
    for w in WORKLOADS:
        if w.key not in kernels:
            continue
        for v in VARIANTS:
            if not applies(v, w):
                continue
            b = Built(w, v, "braze")
            try:
                b.source = variant_source(v, w, kernels[w.key])
            except EditError as e:
                b.error, b.log_head = "edit did not apply", str(e)
            except Exception as e:  # noqa: BLE001
                b.error, b.log_head = f"source: {type(e).__name__}", traceback.format_exc(limit=3)
            jobs.append(b)
        source, refs = ref_kernels(w)
        jobs += [Built(w, r, "ref", source) for r in refs]

    unique: dict[tuple, dict] = {}
    keys = []
    for b in jobs:
        if b.source is None:
            keys.append(None)
            continue
        opts = variant_options(b.variant) if b.kind == "braze" else ()
        key = (b.source, opts)
        keys.append(key)
        unique.setdefault(key, {"name": f"{b.workload.key}_{b.variant.name}", "options": opts})
    items = list(unique.items())
    install_log_tap()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(lambda item: compile_logged(item[0][0], item[1]["name"], arch, item[1]["options"]),
                                items))
    done = {key: result for (key, _), result in zip(items, results, strict=True)}
    for b, key in zip(jobs, keys, strict=True):
        if key is None:
            continue
        b.compiled = done[key]
        if "error" in b.compiled:
            b.error, b.log_head = b.compiled["error"], b.compiled["log_head"]
    return jobs


def function_names(b: Built) -> list[str]:
    if b.kind == "ref":
        return [b.variant.name]
    return re.findall(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\)\s*)?(\w+)\(', b.source or "")


def label(b: Built) -> str:
    return b.variant.label if b.kind == "ref" else b.variant.name


def ptxas_text(b: Built) -> str:
    if not b.compiled or "ptxas" not in b.compiled:
        return ""
    parts = []
    for name in function_names(b):
        i = b.compiled["ptxas"].get(name)
        if i:
            parts.append(f"{i['registers']} regs" + (f", {i['spill_bytes']} B spilled" if i["spill_bytes"] else ""))
    return "; ".join(parts)


def compile_only() -> int:
    builders = fusion_builders()
    kernels = {w.key: kernel_for(builders[w.key](), host_inputs(w)) for w in WORKLOADS}
    for w in WORKLOADS:  # the base source is braze's own (engine.cuda_source)
        base = variant_source(VARIANTS[0], w, kernels[w.key])
        assert base == engine.cuda_source(builders[w.key](), host_inputs(w)).text, w.key
    t0 = time.perf_counter()
    jobs = build_all(kernels, "sm_90", os.cpu_count() or 2)
    log(f"built {len(jobs)} variants for sm_90 in {time.perf_counter() - t0:.1f} s")
    print(f"{'workload':11} {'kind':5} {'variant':26} {'result':8} {'ptxas (sm_90)':28} what")
    failed = 0
    for b in jobs:
        result = "FAILED" if b.error else "ok"
        failed += bool(b.error)
        print(f"{b.workload.key:11} {b.kind:5} {label(b):26} {result:8} {ptxas_text(b):28} {b.variant.what}")
        if b.error:
            print("    " + b.error + ": " + b.log_head.replace("\n", "\n    "))
    print(f"{len(jobs) - failed} of {len(jobs)} compiled; {failed} failed")
    return 1 if failed else 0


# --- the GPU run --------------------------------------------------------------------------------------
def gpu_main() -> None:  # noqa: C901, PLR0915
    import torch  # noqa: PLC0415

    from braze.runtime import cuda_driver as cuda  # noqa: PLC0415
    from braze.runtime.cuda_kernel import CudaExecutor, RtcKernel  # noqa: PLC0415

    engine._kernels.clear()  # noqa: SLF001
    torch.cuda.init()
    dev = cuda.device(0)
    stream = torch.cuda.current_stream().cuda_stream
    can_sleep = hasattr(torch.cuda, "_sleep")
    results: list[dict] = []
    log(f"{dev.name} ({dev.arch}, {dev.sm_count} SMs), torch {torch.__version__}")

    def time_ms(launch: Callable[[int], None], sleep: int = SLEEP_CYCLES) -> float:
        """Median CUDA-event time of launch(set) over REPS calls alternating SETS input sets."""
        for i in range(WARMUP):
            launch(i % SETS)
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(REPS)]
        for i, (start, end) in enumerate(events):
            if can_sleep:
                torch.cuda._sleep(sleep)  # noqa: SLF001
            start.record()
            launch(i % SETS)
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in events)

    def copy_ceiling_gbps(nbytes: int = 256 << 20) -> float:
        """A device-to-device copy of 256 MiB (bytes read + written), two sources alternated."""
        srcs = [torch.ones(nbytes // 4, device="cuda") for _ in range(SETS)]
        dst = torch.empty(nbytes // 4, device="cuda")
        return 2 * nbytes / time_ms(lambda s: dst.copy_(srcs[s])) / 1e6

    copy_gbps = copy_ceiling_gbps()
    log(f"copy ceiling {copy_gbps:.0f} GB/s")

    g = torch.Generator(device="cuda").manual_seed(0)
    builders = fusion_builders()
    cases = {}
    def setup_case(w: Workload) -> dict:
        tdtype = torch.float32 if w.dtype == "float32" else torch.bfloat16
        rand = lambda *shape: torch.randn(*shape, device="cuda", generator=g).to(tdtype)  # noqa: E731
        sets = [[rand(w.rows, w.cols)] + [rand(w.cols) for _ in range(w.weights)] for _ in range(SETS)]
        fusion = builders[w.key]()
        captured = []
        original = CudaExecutor.run

        def spy(self, block, scalars, strm, captured=captured, original=original):
            captured.append((self, block.copy(), dict(scalars), strm))
            return original(self, block, scalars, strm)
        CudaExecutor.run = spy
        try:
            with config.scope(enable="poison_outputs", disable="fast_call"):
                outs = [fusion.execute(ins)[0] for ins in sets]
        finally:
            CudaExecutor.run = original
        assert len(captured) == SETS and captured[0][0] is captured[1][0], "one executor, one launch a call"
        ex = captured[0][0]
        if captured[0][3] != stream:
            log(f"WARNING: braze ran on stream {captured[0][3]}, torch's current stream is {stream}")
        assert len(ex.tasks) == 1, f"{w.key}: {len(ex.tasks)} tasks"
        x0 = sets[0][0].double()
        if w.key == "softmax":
            ref = torch.softmax(x0, -1)
        elif w.key == "layer_norm":
            ref = torch.nn.functional.layer_norm(x0, (w.cols,), sets[0][1].double(), sets[0][2].double(), w.eps)
        else:
            ref = x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + w.eps) * sets[0][1].double()
        del x0
        same = ex.compiled.source == cuda_codegen.generate(ex.kernel, ex.block, restrict=True).text
        log(f"{w.key}: braze kernel {ex.tasks[0].name}, block {ex.block}, launch {ex.plan(captured[0][2], stream)[0]}"
            f"{'' if same else ' (WARNING: regenerated source differs from the executor source)'}")
        return dict(w=w, fusion=fusion, sets=sets, outs=outs, ex=ex, blocks=[c[1] for c in captured],
                    scalars=captured[0][2], ref=ref, ref_scale=ref.abs().max().item())

    for w in WORKLOADS:
        try:
            cases[w.key] = setup_case(w)
        except Exception:  # noqa: BLE001
            log(f"{w.key}: setup failed, its variants are left out:\n{traceback.format_exc()}")

    t0 = time.perf_counter()
    jobs = build_all({k: c["ex"].kernel for k, c in cases.items()}, dev.arch, min(16, os.cpu_count() or 4))
    log(f"compiled {len(jobs)} variants in {time.perf_counter() - t0:.1f} s")

    def check(out: torch.Tensor, case: dict) -> tuple[float, bool, bool]:
        nan = bool(torch.isnan(out).any().item())
        err = ((out.double() - case["ref"]).abs().max().item()) / case["ref_scale"]
        return err, nan, (not nan) and err < case["w"].tolerance

    def measure(row: dict, case: dict, launch: Callable[[int], None], outs: list, sleep: int = SLEEP_CYCLES) -> None:
        for o in outs:
            o.fill_(float("nan"))
        launch(0)
        torch.cuda.synchronize()
        row["max_error"], row["nan_left"], row["ok"] = check(outs[0], case)
        row["gbps"] = case["w"].nbytes / time_ms(launch, sleep) / 1e6

    def braze_launcher(b: Built, case: dict) -> tuple[Callable[[int], None], dict]:
        v, w, ex = b.variant, case["w"], case["ex"]
        module = cuda.Module(dev, b.compiled["cubin"], tuple(t.name for t in ex.tasks))
        task = ex.tasks[0]
        module.allow_shared_memory(task.name, ROW_CACHE_BYTES)
        plan = plan_variant(v, task, case["scalars"], lambda shared: module.resident_blocks(task.name, v.block, shared),
                            dev.sm_count)
        assert plan["lanes"] == variant_lanes(v, w), (plan, variant_lanes(v, w))
        grid, shared, lanes, cached_arg = plan["grid"], plan["shared"], plan["lanes"], plan["cached_row"]
        if v.name == "base":  # the launch braze's executor plans, exactly
            p = ex.plan(case["scalars"], stream)[0]
            assert (p.grid, p.shared, p.scalars[:2]) == (grid, shared, (lanes, cached_arg)), (p, plan)
        scalars = (ctypes.c_int64 * 4)(lanes, cached_arg, 0, 0)
        params = [(ctypes.c_void_p * 5)(blk.ctypes.data, *[ctypes.addressof(scalars) + 8 * i for i in range(4)])
                  for blk in case["blocks"]]
        function = module.functions[task.name]
        keep = (module, scalars, params)

        def launch(s: int) -> None:
            cuda.launch(function, (grid, 1, 1), (v.block, 1, 1), ctypes.addressof(params[s]), stream, shared, task.name)
        launch.keep = keep
        plan["registers"] = _func_attr(cuda, function, "CU_FUNC_ATTRIBUTE_NUM_REGS")
        plan["local_bytes"] = _func_attr(cuda, function, "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES")
        return launch, plan

    rtc_cache: dict[tuple, object] = {}

    def ref_launcher(b: Built, case: dict) -> tuple[Callable[[int], None], list, dict]:
        r, w = b.variant, case["w"]
        key = (b.source, r.name)
        if key not in rtc_cache:
            rtc_cache[key] = RtcKernel(b.source, r.name)
        k = rtc_cache[key]
        resident = k.module.resident_blocks(r.name, r.threads, 0)
        grid = w.rows if r.grid == "rows" else min(w.rows, dev.sm_count * resident)
        outs = [torch.empty_like(s[0]) for s in case["sets"]]
        args = []
        for s, o in zip(case["sets"], outs, strict=True):
            if w.key == "softmax":
                args.append((s[0], o, w.rows))
            elif w.key == "layer_norm":
                args.append((s[0], s[1], s[2], o, w.rows, w.eps))
            else:
                args.append((s[0], s[1], o, w.rows, w.eps))

        def launch(s: int) -> None:
            k.launch(grid, r.threads, args[s], stream=stream)
        plan = dict(grid=grid, block=r.threads, resident=resident,
                    registers=_func_attr(cuda, k.function, "CU_FUNC_ATTRIBUTE_NUM_REGS"),
                    local_bytes=_func_attr(cuda, k.function, "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"))
        return launch, outs, plan

    for b in jobs:
        case = cases[b.workload.key]
        row = {"workload": b.workload.title, "key": b.workload.key, "kind": b.kind, "variant": label(b),
               "what": b.variant.what, "predict": b.variant.predict, "ok": False}
        results.append(row)
        if b.error:
            row.update(error=b.error, log_head=b.log_head)
            continue
        row["ptxas"] = ptxas_text(b)
        if elapsed() > BUDGET_S:
            row["error"] = "skipped: time budget"
            continue
        try:
            if b.kind == "braze":
                launch, plan = braze_launcher(b, case)
                outs = case["outs"]
            else:
                launch, outs, plan = ref_launcher(b, case)
            row["plan"] = plan
            measure(row, case, launch, outs)
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {e}"[:800]
            log(f"{b.workload.key} {label(b)}: {row['error']}")
            try:  # is the context still usable (a launch error), or is the error sticky (a fault)?
                torch.cuda.synchronize()
                torch.ones(1, device="cuda").add_(1).item()
            except Exception:  # noqa: BLE001
                log("the CUDA context is broken: stopping")
                break
        log(f"{b.workload.key:10} {b.kind:5} {label(b):26} {row.get('gbps', float('nan')):7.0f} GB/s "
            f"err {row.get('max_error', float('nan')):.2e} {'ok' if row['ok'] else 'FAIL'}")

    # braze end to end (fusion.execute, as gpu.py), torch eager, then torch.compile
    peers = {
        "softmax": lambda x: torch.softmax(x, -1),
        "layer_norm": lambda x, w, b: torch.nn.functional.layer_norm(x, (4096,), w, b, 1e-5),
        "rms_norm": lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
                                  * w.float()).to(torch.bfloat16),
    }
    for key, case in cases.items():
        w = case["w"]
        execute = lambda s, c=case: c["fusion"].execute(c["sets"][s])[0]  # noqa: E731
        eager = lambda s, c=case, p=peers[key]: p(*c["sets"][s])  # noqa: E731
        for name, fn, sleep in (("braze.execute", execute, 4 * SLEEP_CYCLES), ("torch eager", eager, SLEEP_CYCLES)):
            row = {"workload": w.title, "key": key, "kind": "peer", "variant": name, "ok": False,
                   "what": "fusion.execute end to end (prepared call)" if name == "braze.execute" else "torch"}
            results.append(row)
            try:
                out = fn(0)
                torch.cuda.synchronize()
                row["max_error"], row["nan_left"], row["ok"] = check(out, case)
                row["gbps"] = w.nbytes / time_ms(fn, sleep) / 1e6
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {e}"[:500]
    report(results, copy_gbps, dev.name, "before torch.compile")
    for key, case in cases.items():
        w = case["w"]
        row = {"workload": w.title, "key": key, "kind": "peer", "variant": "torch.compile", "ok": False,
               "what": "torch.compile of the gpu.py peer"}
        results.append(row)
        if elapsed() > BUDGET_S - 45:
            row["error"] = "skipped: time budget"
            continue
        try:
            t0 = time.perf_counter()
            compiled = torch.compile(peers[key])
            out = compiled(*case["sets"][0])
            torch.cuda.synchronize()
            row["compile_s"] = time.perf_counter() - t0
            row["max_error"], row["nan_left"], row["ok"] = check(out, case)
            row["gbps"] = w.nbytes / time_ms(lambda s, c=compiled, cs=case: c(*cs["sets"][s])) / 1e6
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {e}"[:500]
        log(f"{key}: torch.compile {row.get('gbps', float('nan')):.0f} GB/s "
            f"({row.get('compile_s', 0):.0f} s to compile) {row.get('error', '')}")

    report(results, copy_gbps, dev.name, "final")


def _func_attr(cuda, function, name: str) -> int | None:
    try:
        return cuda.function_attribute(function, name.removeprefix("CU_FUNC_ATTRIBUTE_"))
    except Exception:  # noqa: BLE001
        return None


def report(results: list[dict], copy_gbps: float, device: str, stage: str) -> None:
    compile_gbps = {r["key"]: r["gbps"] for r in results if r["variant"] == "torch.compile" and "gbps" in r}
    for row in results:
        if "gbps" in row:
            row["pct_copy"] = 100 * row["gbps"] / copy_gbps
            if row["key"] in compile_gbps:
                row["x_compile"] = row["gbps"] / compile_gbps[row["key"]]
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = os.path.join(out_dir, "norm_variants.json")
        with open(path, "w") as f:
            json.dump({"device": device, "stage": stage, "copy_gbps": copy_gbps, "elapsed_s": elapsed(),
                       "rows": results}, f, indent=1, default=str)
        log(f"wrote {path}")
    print(f"\n[{stage}] norm variants on {device}; copy ceiling {copy_gbps:.0f} GB/s; "
          f"err = max|out-ref|/max|ref| vs float64; "
          f"{elapsed():.0f} s in all")
    print(f"{'workload':27} {'variant':26} {'GB/s':>6} {'%copy':>6} {'xcomp':>6} {'max err':>8} {'ok':4} "
          f"{'grid x block, lanes, smem, regs'}")
    for r in results:
        plan = r.get("plan") or {}
        launch = (f"{plan['grid']}x{plan['block']}" + (f" l{plan['lanes']}" if "lanes" in plan else "")
                  + (f" {plan['shared'] // 1024}K" if plan.get("shared") else "")
                  + (f" r{plan['registers']}" if plan.get("registers") else "")
                  + (f" local{plan['local_bytes']}" if plan.get("local_bytes") else "")) if plan else ""
        name = ("ref:" if r["kind"] == "ref" else "") + r["variant"]
        if "gbps" not in r:
            print(f"{r['workload']:27} {name:26} {'-':>6} {'':>6} {'':>6} {'':>8} {'FAIL':4} "
                  f"{(r.get('error') or '')[:60]}")
            for line in (r.get("log_head") or "").splitlines()[:4]:
                print("      " + line[:140])
            continue
        x = f"{r['x_compile']:6.2f}" if "x_compile" in r else f"{'':>6}"
        print(f"{r['workload']:27} {name:26} {r['gbps']:6.0f} {r['pct_copy']:5.1f}% {x} {r['max_error']:8.1e} "
              f"{'ok' if r['ok'] else 'BAD':4} {launch}")
    print("best correct (goal: >= 85% of copy, >= 1.3x torch.compile for softmax and layer_norm):")
    for w in WORKLOADS:
        for kind in ("braze", "ref"):
            good = [r for r in results if r["key"] == w.key and r["kind"] == kind and r["ok"] and "gbps" in r]
            if good:
                r = max(good, key=lambda r: r["gbps"])
                x = f", {r['x_compile']:.2f}x torch.compile" if "x_compile" in r else ""
                print(f"  {w.title:27} {kind:5} {r['variant']:26} {r['gbps']:6.0f} GB/s {r['pct_copy']:5.1f}%{x}")


if __name__ == "__main__":
    if COMPILE_ONLY:
        sys.exit(compile_only())
    gpu_main()
