"""HostProgram: the printer (golden), `BRAZE_DUMP=host_program`, and compiled fusions whose
outputs have split, merge and reorder allocation domains, checked against the reference backend."""

from __future__ import annotations

import numpy as np
import pytest
from layouts import LAYOUTS, layout_fusion, merge_split, split_inner

import braze as bz
from braze import config, engine
from braze.host.program import Alias, Allocate, CpuDevice, Frame, Free, Launch, host_buffer
from braze.host.shapes import ShapeProgram, infer_layout

rng = np.random.default_rng(0)


def _every_instruction_fusion() -> bz.Fusion:
    """A cut intermediate (the mean), a view output, an in-place output and a hidden padded output."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        b = f.define_tensor((-1,), name="b")
        k = f.define_scalar(dtype=bz.float32, name="k")
        f.add_output(x - x.mean())
        f.add_output(x.T)
        f.add_output(x * k, alias=x)
        y = bz.ops.relu(x + b)
        y.split(1, 4)
        y.set_allocation_domain(y.loop)
        f.add_output(y, hidden=True)
    return f


GOLDEN = """\
HostProgram fusion(T0 'x': float32[T0_s0, T0_s1], T1 'b': float32[T1_s0], T2 'k': float32 scalar)
  Allocate T3: float32 sizes [] strides [] numel 1 zero_init=False
  Allocate T4: float32 sizes [T0_s0, T0_s1] strides [T0_s1, 1] numel T0_s1 * T0_s0 zero_init=False
  Allocate T6: float32 sizes [T0_s0, T0_s1] strides [T0_s1, 1] numel T0_s1 * T0_s0 zero_init=False
  Allocate T9: float32 sizes [T0_s0, T0_s1] strides [ceildiv(T0_s1, 4) * 4, 1] numel ceildiv(T0_s1, 4) * 4 * T0_s0 \
zero_init=False
  Launch fusion(T0, T1, T2) -> (T3, T4, T6, T9)
  Free T3
  Alias T5 = T0 view (permute)
  Alias T6 = T0 written back
  Free T6
  return (T4, T5, T6, T9)"""


def _runtime(f: bz.Fusion):
    (runtime,) = engine._cache_of(f).entries.values()
    return runtime


def _inputs() -> list:
    return [rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32), 2.0]


def test_printer_golden() -> None:
    f = _every_instruction_fusion()
    f.execute(_inputs())
    assert str(_runtime(f).program) == GOLDEN


def test_instruction_kinds_and_order() -> None:
    f = _every_instruction_fusion()
    f.execute(_inputs())
    kinds = [type(i).__name__ for i in _runtime(f).program.instructions]
    assert kinds == ["Allocate"] * 4 + ["Launch", "Free", "Alias", "Alias", "Free"]
    assert {Allocate, Launch, Alias, Free} == {type(i) for i in _runtime(f).program.instructions}


def test_dump_host_program_once_per_compile(capsys) -> None:
    f = _every_instruction_fusion()
    with config.scope(dump="host_program"):
        f.execute(_inputs())
        f.execute(_inputs())  # a cache hit builds and prints nothing
    assert capsys.readouterr().err == f"===== braze dump: host_program =====\n{GOLDEN}\n"


def test_every_instruction_computes_what_the_reference_does() -> None:
    f = _every_instruction_fusion()
    inputs = _inputs()
    expected = f.execute([a.copy() if isinstance(a, np.ndarray) else a for a in inputs], backend="reference")
    x = inputs[0]
    outs = f.execute(inputs)
    assert len(outs) == 3  # the hidden output is computed, not returned
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert outs[2] is x and np.shares_memory(outs[1], x)  # written in place; a view of the (updated) input


# --- outputs with allocation domains, end to end ---------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda fn: fn.__name__)
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 7, 4), (3, 0, 2)])
def test_layouts_end_to_end(layout, shape) -> None:
    f = layout_fusion(layout)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    (got,) = f.execute([a, b])
    (want,) = f.execute([a, b], backend="reference")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.strides == want.strides  # both backends lay the output out as its allocation domain says
    (allocate,) = [i for i in _runtime(f).program.instructions if isinstance(i, Allocate)]
    bindings = dict(zip(("T0_s0", "T0_s1", "T0_s2"), shape))
    assert list(got.strides) == [s.evaluate(bindings) * 4 for s in allocate.layout.strides]
    assert got.base.size == allocate.layout.numel.evaluate(bindings)  # padding included


def test_padded_allocation_size() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        out = bz.ops.neg(x)
        out.set_allocation_domain(split_inner(out))
        f.add_output(out)
    (got,) = f.execute([np.ones((3, 10), np.float32)])
    assert got.strides == (12 * 4, 4) and got.base.size == 36
    np.testing.assert_array_equal(got, -np.ones((3, 10), np.float32))


def test_a_blocked_output_layout_is_unsupported() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        out = bz.ops.neg(x)
        out.split(1, 4).reorder({1: 0})
        out.set_allocation_domain(out.loop)
        f.add_output(out)
    with pytest.raises(bz.UnsupportedError, match="is no strided view"):
        f.execute([np.ones((3, 8), np.float32)])


def test_new_extents_reuse_the_shape_function() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        out = bz.ops.abs(x)
        out.set_allocation_domain(merge_split(out))
        f.add_output(out)
    f.execute([np.ones((2, 3), np.float32)])
    shapes = _runtime(f).program.shape_function
    for shape in [(5, 7), (3, 4), (9, 8), (16, 3)]:  # one signature: extents of 1 or 0 change the strides
        a = rng.standard_normal(shape).astype(np.float32)
        with bz.record() as rec:
            (got,) = f.execute([a])
        assert rec.compiles == [] and _runtime(f).program.shape_function is shapes
        np.testing.assert_array_equal(got, np.abs(a))
        assert got.base.size == -(-a.size // 8) * 8


def test_free_drops_the_intermediate_right_after_the_launch(monkeypatch) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        f.add_output(x - x.mean())  # the mean is materialized by a task of its own
    a = rng.standard_normal((4, 6)).astype(np.float32)
    with config.scope(disable="fast_call"):  # the second call runs the host program too
        f.execute([a])
        program = _runtime(f).program
        (free,) = [i for i in program.instructions if isinstance(i, Free)]
        assert program.instructions.index(free) == 1 + [type(i) for i in program.instructions].index(Launch)
        freed = []
        run = free.run
        monkeypatch.setattr(free, "run", lambda frame: (freed.append(frame.values[free.slot]), run(frame),
                                                        freed.append(frame.values[free.slot])))
        (got,) = f.execute([a])
    assert isinstance(freed[0], np.ndarray) and freed[0].shape == () and freed[1] is None
    np.testing.assert_allclose(got, a - a.mean(), rtol=1e-5, atol=1e-6)


def test_zero_initialized_allocation_is_padded_and_zero() -> None:
    f = bz.Fusion()
    t = f.define_tensor((-1, -1))
    t.split(1, 4)
    t.set_allocation_domain(t.loop)
    layout = infer_layout(t)
    allocate = Allocate(t, True, 0, layout, 0, CpuDevice())
    frame = Frame([None], {}, ShapeProgram.of("zero", layout.values).evaluate([3, 5]))
    allocate.run(frame)
    (array,) = frame.values
    assert array.shape == (3, 5) and array.strides == (8 * 4, 4) and array.base.size == 24
    assert not array.base.any()
    assert "zero_init=True" in allocate.text()


def _alternating(f: bz.Fusion) -> None:
    """Pointwise and reduction steps in turn: each full reduction is broadcast back, so it gets a task of its own."""
    x = f.define_tensor((-1, -1), name="x")
    y = x
    for step in range(6):
        y = bz.ops.tanh(y * (step + 1.5)) + 0.25
        y = y - bz.ops.sum(y) * (1.0 / 64)
    f.add_output(y)


def test_many_segments_give_identical_results_with_and_without_the_host_jit() -> None:
    a = rng.standard_normal((5, 7)).astype(np.float32)
    results = []
    for disable in ("", "host_jit"):
        with config.scope(disable=disable):
            f = bz.Fusion()
            with f:
                _alternating(f)
            f.execute([a[:4]])  # the host program's first run computes its shapes in Python
            with bz.record() as rec:
                (out,) = f.execute([a])
        assert _runtime(f).program.shape_function.native == (disable == "")
        assert len(rec.launches) >= 7  # the reductions are materialized, then the output
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    (want,) = f.execute([a], backend="reference")
    np.testing.assert_allclose(results[0], want, rtol=1e-4, atol=1e-5)


def test_cached_calls_hold_python_memory_steady() -> None:
    import tracemalloc

    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        y = bz.ops.relu(x)
        y.set_allocation_domain(split_inner(y))
        f.add_output(y)
        f.add_output(x.T)
    inputs = [rng.standard_normal((3, 5)).astype(np.float32)]
    for _ in range(2_000):  # warm up: compile, fill caches and the interpreter's free lists of small objects
        f.execute(inputs)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(10_000):
            f.execute(inputs)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 64 * 1024, f"10,000 cached calls grew Python memory by {grown} bytes"


def test_a_split_by_an_input_extent_of_zero_is_an_input_error() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        k = f.define_tensor((-1,), name="k")
        y = bz.ops.neg(x)
        y.split(1, k.shape[0])  # a symbolic factor: the padding depends on another input
        y.set_allocation_domain(y.loop)
        f.add_output(y)
    (got,) = f.execute([np.ones((2, 5), np.float32), np.ones(3, np.float32)])
    assert got.strides == (6 * 4, 4) and got.base.size == 12
    with pytest.raises(bz.InputError, match=r"^shapes of fusion: ceildiv\(T0_s1, T1_s0\) divides by zero with "
                                            r"T0_s0 = 2, T0_s1 = 5, T1_s0 = 0$"):
        f.execute([np.ones((2, 5), np.float32), np.ones(0, np.float32)])


def test_poisoned_host_outputs_start_as_0xff_bytes():
    """Under BRAZE_ENABLE=poison_outputs a host output starts as 0xFF bytes (NaN for floats), as on the
    GPU, so an element no kernel writes shows; the padding of a split allocation stays poisoned."""
    with config.scope(enable="poison_outputs"):
        buffer = host_buffer(np.dtype(np.float32), 6, [2, 3], [3, 1])
        ints = host_buffer(np.dtype(np.int32), 4, [4], [1])
    assert np.isnan(buffer).all() and (ints == -1).all()
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        y = bz.ops.relu(x)
        y.split(1, 4)
        y.set_allocation_domain(y.loop)  # rows padded to a multiple of 4 elements
        f.add_output(y)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    with config.scope(enable="poison_outputs"):
        (out,) = f.execute([x], backend="llvm")
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    padded = np.lib.stride_tricks.as_strided(out, shape=(3, 8), strides=out.strides)
    assert np.isnan(padded[:, 5:]).all()
