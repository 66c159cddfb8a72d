"""The CUDA of a row a task stores and reads back (passes/fold_rows.py; no GPU needed): one row cache
holds the stored row (cuda_plan.RowCache.stored) in registers or shared memory, a register row's
storing loop issues its loads first, a read-back any other way takes no lanes, rand draws four words
a block in 16-byte loops (cuda_random), and NVRTC compiles every path."""

from __future__ import annotations

import dataclasses
import re

import ml_dtypes
import numpy as np
import pytest

import braze as bz
from braze import dtypes as dt
from braze import engine
from braze.codegen import cuda
from braze.codegen.cuda_plan import plan_lanes, plan_row_caches, stored_rows
from braze.codegen.cuda_random import philox_runs
from braze.compile import nvrtc
from braze.kir import nodes as k

_NUMPY = {bz.float32: np.float32, bz.bfloat16: ml_dtypes.bfloat16, bz.float16: np.float16, bz.float64: np.float64}


def residual(f: bz.Fusion, dtype, norm: str = "rms_norm", rank: int = 2, dropout: bool = False) -> None:
    x, r = (f.define_tensor([-1] * rank, dtype=dtype) for _ in range(2))
    w = f.define_tensor([-1], dtype=dtype)
    wide = bz.ops.cast(x, bz.float32)
    if dropout:
        wide = bz.ops.where(bz.ops.rand(x.shape, seed=1234) >= 0.1, wide * (1 / 0.9), 0.0)
    h = bz.ops.cast(wide + bz.ops.cast(r, bz.float32), dtype)
    y = {"rms_norm": lambda: bz.ops.rms_norm(h, w, eps=1e-6), "layer_norm": lambda: bz.ops.layer_norm(h, w, w),
         "softmax": lambda: bz.ops.softmax(h, -1), "log_softmax": lambda: bz.ops.log_softmax(h, -1),
         "sum": lambda: bz.ops.sum(h, axes=[rank - 1])}[norm]()
    f.add_output(y)
    f.add_output(h)


def source(dtype=bz.bfloat16, shape=(8, 64), name="fusion", **options) -> cuda.CudaSource:
    with bz.Fusion(name=name) as f:
        residual(f, dtype, rank=len(shape), **options)
    arrays = [np.ones(shape if t.ndim == len(shape) else shape[-1:], _NUMPY[dtype]) for t in f.inputs]
    return engine.cuda_source(f, arrays)


def test_the_stored_row_is_the_one_row_cache_the_later_loops_read():
    src = source()
    (caches,) = src.row_caches
    (cache,) = caches  # not x and the residual: the row they make
    assert cache.stored and len(cache.loops) == 2 and cache.dtype == dt.bfloat16
    body = src.body
    # Registers: the storing loop's 16-byte store vector is the cache's slot; shared memory: the same
    # vector, stored by cached rows; one lane's elements at a time: each element as it is stored.
    assert re.search(r"bz_rc0\[(\w+)_k\] = w0_\1;", body)
    assert re.search(r"\*reinterpret_cast<bz_bfloat168\*>\(&row_cache0\[(\w+)_8\]\) = w0_\1;", body)
    assert re.search(r"if \(cached_row\) row_cache0\[\w+ - 0\] = T\d+_value_\d+;", body)
    assert src.register_rows == (2 * 8 * 256,)  # 2 vectors of 8 bfloat16 a thread: 4096 elements


def test_a_register_row_issues_the_storing_loops_loads_before_using_them():
    body = source().body
    arrays = re.findall(r"bz_bfloat168 (bz_pl\d+_\w+)\[2\];", body)
    assert len(arrays) == 2  # x and the residual
    assert all(re.search(rf"{a}\[\w+_k\] = \*reinterpret_cast", body) for a in arrays)
    # float32 rows keep their registers for the cache alone: x, r and h would not fit REGISTER_PRELOAD_BYTES.
    float_src = source(bz.float32)
    assert "bz_pl" not in float_src.body and float_src.register_rows == (4 * 8 * 256,)


def test_dropout_draws_one_philox_block_for_four_elements_of_a_16_byte_loop():
    body = source(dropout=True, norm="layer_norm").body
    runs = re.findall(r"const uint4 (ph\d+_\w+) = bz_philox_run\(1234LL, 0LL, ", body)
    assert runs  # in each copy of the 16-byte storing loop
    assert all(f"((long long){run}.w)" in body for run in runs)
    assert "bz_philox(1234LL" in body  # rows that cannot take 16 bytes draw a word an element


def test_the_storing_loop_is_vectorized_though_its_loads_sit_under_a_dropout_mask():
    (caches,) = source(dropout=True, norm="layer_norm").row_caches
    assert caches and caches[0].stored and len(caches[0].loops) == 3
    assert "bz_rc0" in source(dropout=True, norm="layer_norm").body


# --- read-backs, by hand ---------------------------------------------------------------------------
F32, I64 = dt.float32, dt.int64
X, H, Y = (k.ArrayParam(name, F32, 2, (None, 1)) for name in ("X", "H", "Y"))
N = k.ScalarRef(k.ScalarParam("n", I64))
P, ROW, J, S = k.Var("p"), k.Var("i"), k.Var("j"), k.Var("s")
ZERO = k.Const(0, I64)


def read_back(index=lambda v: v, end=N) -> k.Task:
    """A row stored by one loop, read back by the next at `index(j)`."""
    store = k.For(S, ZERO, N, (k.Store(H, (ROW, S), k.Load(X, (ROW, S))),))
    read = k.For(J, ZERO, end, (k.Store(Y, (ROW, J), k.Load(H, (ROW, index(J)))),))
    return k.Task("t", "range_for", (k.Let(ROW, P), store, read), P, ZERO, N)


def test_a_row_read_back_at_its_own_index_shares_a_cache_with_its_store():
    task = read_back()
    (row,) = stored_rows(task).values()
    assert [loop.var for loop in row.loops] == [S, J]
    (cache,) = plan_row_caches(task, plan_lanes(task))
    assert cache.stored and cache.role(id(task.body[1])) == "store" and cache.role(id(task.body[2])) == "load"


@pytest.mark.parametrize("task", [
    read_back(index=lambda v: k.Binary("sub", k.Binary("sub", N, k.Const(1, I64), I64), v, I64)),  # reversed
    read_back(end=k.Binary("sub", N, k.Const(1, I64), I64)),  # another range: lanes split it otherwise
], ids=["another element", "another range"])
def test_a_row_read_back_any_other_way_takes_no_lanes(task):
    assert stored_rows(task) is None and not plan_lanes(task).loops
    kernel = k.Kernel("kern", (X, H, Y, k.ScalarParam("n", I64)), (task,))
    assert "lanes32" not in cuda.generate(kernel).body  # one thread a row


def _counter_loop(counter: k.Expr, seed: k.Expr | None = None) -> k.For:
    c, seed = k.Var("c", I64), k.Const(7, I64) if seed is None else seed
    word = k.Philox(seed, ZERO, k.Binary("floordiv", c, k.Const(4, I64), I64),
                    k.Binary("remainder", c, k.Const(4, I64), I64))
    return k.For(J, ZERO, N, (k.Let(c, counter), k.Store(Y, (ROW, J), k.Cast(word, F32))))


@pytest.mark.parametrize("counter, runs", [
    (k.Cast(k.Binary("add", k.Binary("mul", ROW, N, I64), J, I64), I64), 1),  # a row's flat index
    (k.Binary("sub", k.Binary("add", k.Const(3, I64), J, I64), ROW, I64), 1),
    (k.Binary("mul", J, k.Const(2, I64), I64), 0),  # every other counter: not four neighbours
    (k.Binary("sub", ROW, J, I64), 0),  # counting down
    (k.Binary("add", k.Load(k.ArrayParam("O", I64, 1, (1,)), (ROW,)), J, I64), 0),  # read from memory
])
def test_four_neighbouring_counters_take_one_run(counter, runs):
    assert len(philox_runs(_counter_loop(counter), set())) == runs


def test_a_seed_that_changes_along_the_row_takes_no_run():
    assert not philox_runs(_counter_loop(J, seed=J), set())


# --- NVRTC ----------------------------------------------------------------------------------------
def _sources() -> list[cuda.CudaSource]:
    found = []
    for dtype in (bz.bfloat16, bz.float32, bz.float16, bz.float64):
        for norm in ("rms_norm", "layer_norm", "softmax", "log_softmax", "sum"):
            found.append(source(dtype, name=f"{norm}_{dtype.name}", norm=norm))
        found.append(source(dtype, name=f"dropout_{dtype.name}", norm="layer_norm", dropout=True))
    found.append(source(shape=(2, 3, 64), name="batched", norm="layer_norm", dropout=True))
    no_lanes = dataclasses.replace(read_back(end=k.Binary("sub", N, k.Const(1, I64), I64)), name="t_no_lanes")
    found.append(cuda.generate(k.Kernel("read_backs", (X, H, Y, k.ScalarParam("n", I64)), (read_back(), no_lanes))))
    return found


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_every_stored_row_path_compiles_with_nvrtc():
    sources = _sources()
    assert any(c.stored for s in sources for caches in s.row_caches for c in caches)
    assert nvrtc.compile_ptx(cuda.with_prelude("\n".join(s.body for s in sources)), "stored_rows", "sm_90", ("-G",))


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_the_suites_dropout_fusion_compiles_optimized():
    # Optimized, the register arrays of the preloads and the cache must be indexed by constants.
    text = source(shape=(8192, 4096), norm="layer_norm", dropout=True, name="dropout_residual_layer_norm").text
    assert nvrtc.compile_cubin(text, "dropout_residual_layer_norm", "sm_90")[:4] == b"\x7fELF"


def test_words_a_row_cache_holds_take_no_run():
    loop = _counter_loop(k.Cast(k.Binary("add", k.Binary("mul", ROW, N, I64), J, I64), I64))
    let, store = loop.body
    cached = store.value  # the word as a float, a value a row cache would hold
    loop = dataclasses.replace(loop, body=(let, dataclasses.replace(store, value=k.Binary(
        "add", cached, k.Const(1.0, F32), F32))))
    assert philox_runs(loop, set()) and not philox_runs(loop, {cached})
