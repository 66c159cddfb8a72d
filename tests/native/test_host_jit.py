"""The host JIT: native shape functions agree with Python (floor semantics included), fall back to
Python with one warning when compiling fails, obey `BRAZE_DISABLE=host_jit` and `BRAZE_DUMP=host_jit`."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze import config, engine
from braze.compile import llvm_toolchain
from braze.errors import HostJitWarning
from braze.host import shapes
from braze.host.shapes import PythonShapeFunction, ShapeProgram
from braze.ir.scalar import Scalar, ceildiv, smax, smin, symbol
from braze.native import host_jit

A, B, C = symbol("a"), symbol("b"), symbol("c")


@pytest.fixture
def fresh_warning():
    """Each test sees the host JIT as if it had never warned in this process."""
    host_jit._warned = False
    yield
    host_jit._warned = False


@pytest.fixture
def uncached(monkeypatch, tmp_path):
    """Host functions are built from their IR again: none loaded in this process, an empty disk
    cache (a test that breaks the IR must load nothing under a name loaded before)."""
    monkeypatch.setattr(host_jit, "_loaded", {})
    with config.scope(cache_dir=tmp_path):
        yield


def _program() -> ShapeProgram:
    return ShapeProgram.of("demo", [A * B, ceildiv(A, 4) * 4, A // B, A % B, smin(A, C), smax(B, C) - 3, 7])


def test_native_matches_python() -> None:
    program = _program()
    native, python = shapes.native_or_python(program), PythonShapeFunction(program)
    assert native.native and not python.native
    for extents in ([7, 3, 2], [0, 5, 9], [-7, 3, 1], [7, -3, 0], [-8, -3, 4]):
        assert native(extents) == python(extents) == program.evaluate(extents)


_EXPRESSIONS = st.recursive(
    st.sampled_from([A, B, C]) | st.integers(-9, 9).map(Scalar.const),
    # Built unsimplified, so constant divisors of zero and negative operands reach the shape function.
    lambda inner: st.tuples(st.sampled_from(["+", "-", "*", "//", "%", "ceildiv", "min", "max"]), inner, inner).map(
        lambda t: Scalar(t[0], (t[1], t[2]))),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_EXPRESSIONS, min_size=1, max_size=4), st.lists(st.integers(-20, 20), min_size=3, max_size=3))
def test_native_matches_python_on_random_expressions(values, extents) -> None:
    program = ShapeProgram.of("random", values, symbols=("a", "b", "c"))
    native = host_jit.NativeShapeFunction(program)
    try:
        expected = program.evaluate(extents)
    except ZeroDivisionError:
        for fn in (native, PythonShapeFunction(program)):
            with pytest.raises(bz.InputError, match="divides by zero"):
                fn(extents)
        return
    assert native(extents) == PythonShapeFunction(program)(extents) == expected


def test_division_by_zero_names_the_expression() -> None:
    program = ShapeProgram.of("div", [A + 1, ceildiv(A, B)])
    for fn in (shapes.shape_function(program), PythonShapeFunction(program)):
        with pytest.raises(bz.InputError, match=r"^shapes of div: ceildiv\(a, b\) divides by zero with a = 5, b = 0$"):
            fn([5, 0])


def test_shape_functions_run_in_python_first_then_natively() -> None:
    program = ShapeProgram.of("tiered", [A * B - 2, ceildiv(A, B)])
    tiered = shapes.shape_function(program)
    assert not tiered.native
    assert tiered([9, 4]) == [34, 3] and not tiered.native
    assert tiered([9, 4]) == [34, 3] and tiered.native
    assert tiered([-9, 2]) == [-20, -4]


def test_a_jit_failure_falls_back_with_one_warning(monkeypatch, fresh_warning, uncached) -> None:
    monkeypatch.setattr(host_jit, "llvm_source", lambda program, name: "this is not LLVM IR")
    with pytest.warns(HostJitWarning, match="host JIT failed for the shapes of 'demo'") as caught:
        first = shapes.native_or_python(_program())
        second = shapes.native_or_python(_program())
    assert len(caught) == 1
    assert not first.native and not second.native
    assert first([7, 3, 2]) == _program().evaluate([7, 3, 2])


def test_a_fusion_runs_after_a_jit_failure(monkeypatch, fresh_warning, uncached) -> None:
    def broken(program, name):
        raise RuntimeError("no native code today")

    monkeypatch.setattr(host_jit, "llvm_source", broken)
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1))
        y = bz.ops.exp(x)
        y.split(1, 4)
        y.set_allocation_domain(y.loop)
        f.add_output(y)
    a = np.linspace(0, 1, 15, dtype=np.float32).reshape(3, 5)
    f.execute([a[:2]])  # the first run of the host program takes Python; the second builds native code
    with pytest.warns(HostJitWarning, match="no native code today"):
        (got,) = f.execute([a])
    np.testing.assert_allclose(got, np.exp(a), rtol=1e-6)
    (runtime,) = engine._cache_of(f).entries.values()
    assert not runtime.program.shape_function.native


def test_disable_host_jit_runs_python_without_warning(fresh_warning) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with config.scope(disable="host_jit"):
            fn = shapes.shape_function(_program())
    assert not fn.native and fn([7, 3, 2]) == _program().evaluate([7, 3, 2])


def test_dump_host_jit_prints_the_llvm_ir(capsys) -> None:
    with config.scope(dump="host_jit"):
        shapes.native_or_python(_program())
    err = capsys.readouterr().err
    assert err.startswith("===== braze dump: host_jit =====\n")
    assert 'define i32 @"braze_shapes_demo_' in err and "sdiv i64" in err


_TASK_IR = """
define void @"task"(i64 %lo, i64 %hi, i64* %args) {
  store i64 %hi, i64* %args
  ret void
}
"""


def test_freed_native_code_leaves_later_compiles_working() -> None:
    # An engine frees the target machine it is given; freeing loaded code must not free the shared one.
    for n in range(4):
        obj, _ = llvm_toolchain.compile_object(_TASK_IR, "task")
        loaded = llvm_toolchain.LoadedObject(obj, ["task"])
        block = np.zeros(1, np.int64)
        loaded.functions["task"](0, n, block.ctypes.data)
        assert block[0] == n
        del loaded
        gc.collect()


def test_host_functions_load_from_the_disk_cache_without_building_ir(tmp_path) -> None:
    program = ShapeProgram.of("cached", [A * 3 + B, ceildiv(B, 5)])
    name = host_jit.function_name(program)
    assert name == host_jit.function_name(ShapeProgram.of("cached", [A * 3 + B, ceildiv(B, 5)]))  # same in any process
    assert name != host_jit.function_name(ShapeProgram.of("cached", [A * 3 + B, ceildiv(B, 6)]))
    built = []

    def source() -> str:
        built.append(name)
        return host_jit.llvm_source(program, name)

    with config.scope(cache_dir=tmp_path):
        generated = host_jit._object_code(name, source)
        assert built == [name] and list(tmp_path.rglob("*.bin"))
        assert host_jit._object_code(name, source) == generated
        assert built == [name]  # the second came from the disk
    with config.scope(cache_dir=tmp_path / "empty"):
        assert host_jit._object_code(name, source) == generated and len(built) == 2


def test_one_shape_program_compiles_once_per_process() -> None:
    first, second = (host_jit.NativeShapeFunction(ShapeProgram.of("twice", [A * B + 1])) for _ in range(2))
    assert first._builtin is not second._builtin and first._spec.function == second._spec.function
    assert first([6, 7]) == second([6, 7]) == [43]


def test_native_shape_functions_run_as_builtins_and_agree_with_python(monkeypatch) -> None:
    program = _program()
    builtin = host_jit.NativeShapeFunction(program)
    for extents in ([7, 3, 2], [-8, -3, 4], [2**40, 3, -(2**40)]):
        assert builtin(extents) == PythonShapeFunction(program)(extents) == program.evaluate(extents)
    with pytest.raises(bz.InputError, match="divides by zero"):
        builtin([5, 0, 1])
    with pytest.raises(TypeError):
        builtin(["7", 3, 2])
    with pytest.raises(OverflowError):
        builtin([2**64, 3, 2])
    monkeypatch.setattr(host_jit, "builtins_available", lambda: False)  # no builtins: Python, not ctypes
    assert isinstance(shapes.shape_function(program), PythonShapeFunction)
    assert builtin._builtin(1, 2) == -1  # a wrong count answers -1, never reads past its buffers
