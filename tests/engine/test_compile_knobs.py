"""What the compiled CPU code depends on: the fast-math knob, `CompiledKernel.recompile`, and the
dumps that show the cut into segments and the Kernel IR."""

from __future__ import annotations

import numpy as np

import braze as bz
from braze import config, engine
from braze.runtime.backends.cpu import KernelExecutor
from braze.runtime.fusion_runtime import FusionRuntime
from braze.runtime.inputs import bind_inputs

rng = np.random.default_rng(11)


def _fma(name: str = "fma") -> bz.Fusion:
    with bz.Fusion(name=name) as f:
        x, y = f.define_tensor((-1,)), f.define_tensor((-1,))
        f.add_output(x * y + 3.0)
    return f


def _compiled(f: bz.Fusion):
    (runtime,) = engine._cache_of(f).entries.values()
    return runtime.executor.compiled


def _inputs():
    return [rng.standard_normal(100, np.float32), rng.standard_normal(100, np.float32)]


# --- IEEE by default, fast-math behind BRAZE_ENABLE=fast_math ---------------------------------------------
def test_kernels_are_ieee_by_default(tmp_path):
    f = _fma("ieee_fma")
    with config.scope(cache_dir=tmp_path):
        f.execute(_inputs())
    compiled = _compiled(f)
    assert not compiled.params.fast_math
    assert "fmul float" in compiled.source and " fast " not in compiled.source


def test_the_fast_math_knob_compiles_a_kernel_of_its_own(tmp_path):
    x, y = _inputs()
    with config.scope(cache_dir=tmp_path):
        ieee = _fma("knob_fma")
        ieee.execute([x, y])
        with config.scope(enable="fast_math"), bz.record() as rec:
            fast = _fma("knob_fma")  # the same Kernel IR as `ieee`'s
            (z,) = fast.execute([x, y])
    assert _compiled(fast) is not _compiled(ieee) and rec.compiles == ["knob_fma"]
    assert _compiled(fast).params.fast_math and "fmul fast float" in _compiled(fast).source
    np.testing.assert_allclose(z, x * y + 3, rtol=1e-6)


def test_a_knob_changed_between_calls_of_one_fusion_or_kernel_takes_effect(tmp_path):
    f = _fma("rescoped_fma")

    @bz.kernel
    def doubled(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1]):
        for i in range(x.shape[0]):
            y[i] = x[i] * 2.0 + 1.0

    x, y = np.linspace(-1, 1, 50, dtype=np.float32), np.ones(50, np.float32)  # the module's draws left as they were
    with config.scope(cache_dir=tmp_path):
        f.execute([x, y])
        doubled(x, y)
        with config.scope(enable="fast_math"):  # the same inputs: cached, but under other knobs
            (z,) = f.execute([x, y])
            doubled(x, y)
    assert [r.executor.compiled.params.fast_math for r in engine._cache_of(f).entries.values()] == [False, True]
    assert [e.launcher.compiled.params.fast_math for e in doubled.entries.values()] == [False, True]
    np.testing.assert_allclose(z, x * y + 3, rtol=1e-6)
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)


# --- one compiled kernel for fusions alike but for their names ----------------------------------------------
def test_fusions_alike_but_for_their_names_share_one_compiled_kernel(tmp_path):
    engine.forget_compiled_kernels()  # none from an earlier test alike
    with config.scope(cache_dir=tmp_path), bz.record() as rec:
        layers = [_fma(f"layer_{n}_fma") for n in range(4)]  # a model's layers, a region each
        inputs = [_inputs() for _ in layers]
        results = [f.execute(x) for f, x in zip(layers, inputs)]
        with bz.Fusion(name="layer_other") as other:  # another constant: other code
            x, y = other.define_tensor((-1,)), other.define_tensor((-1,))
            other.add_output(x * y + 4.0)
        other.execute(_inputs())
    assert len({id(_compiled(f)) for f in layers}) == 1 and _compiled(other) is not _compiled(layers[0])
    assert rec.compiles == ["layer_0_fma", "layer_other"]
    for (x, y), (z,) in zip(inputs, results):
        np.testing.assert_allclose(z, x * y + 3, rtol=1e-6)


# --- CompiledKernel.recompile ---------------------------------------------------------------------------
def test_recompile_with_new_params_gives_a_new_kernel_that_runs(tmp_path):
    f, inputs = _fma("recompiled_fma"), _inputs()
    with config.scope(cache_dir=tmp_path):
        f.execute(inputs)
        (runtime,) = engine._cache_of(f).entries.values()
        with bz.record() as rec:
            fast = runtime.executor.compiled.recompile(fast_math=True)
    # Other params, another disk cache key: a miss. (The kernel may be another fusion's alike but for
    # its name, compiled before: engine.code_key.)
    assert rec.compiles == [runtime.executor.compiled.kernel.name]
    assert fast is not runtime.executor.compiled and fast.kernel is runtime.executor.compiled.kernel
    assert fast.params.fast_math and fast.params.index_type == runtime.executor.compiled.params.index_type
    assert fast.cache_key != runtime.executor.compiled.cache_key and fast.binary is not None
    rerun = FusionRuntime(f, KernelExecutor(fast), runtime.writes, runtime.params)
    (z,) = rerun.run(bind_inputs(f, inputs))
    np.testing.assert_allclose(z, inputs[0] * inputs[1] + 3, rtol=1e-6)


# --- BRAZE_DUMP=segments and BRAZE_DUMP=kernel_ir --------------------------------------------------------
def _dumped(capsys, name: str) -> list[str]:
    """The bodies of the `name` dumps written to stderr."""
    header = f"===== braze dump: {name} =====\n"
    return [part.split("===== braze dump:")[0].rstrip("\n") for part in capsys.readouterr().err.split(header)[1:]]


def test_segments_dump_shows_the_cut(capsys):
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        mean = x.mean()
        f.add_output(x - mean)
    with config.scope(dump="segments"):
        f.execute([rng.standard_normal((6, 5), np.float32)])
    (text,) = _dumped(capsys, "segments")
    first, second = text.splitlines()  # the mean materialized by a segment of its own, then the output
    assert first.startswith(f"{mean.name}: ") and "scheduler='reduction'" in first
    assert second.startswith(f"{f.outputs[0].tv.name}: ") and "scheduler='normalization'" in second


def test_segments_dump_of_an_uncut_fusion_is_one_line(capsys):
    with bz.Fusion() as f:
        f.add_output(bz.ops.softmax(f.define_tensor((-1, -1))))
    with config.scope(dump="segments"):
        f.execute([rng.standard_normal((6, 5), np.float32)])
    (text,) = _dumped(capsys, "segments")
    assert len(text.splitlines()) == 1 and "scheduler='normalization'" in text


def test_kernel_ir_dump_is_stable(capsys, tmp_path):
    def build() -> bz.Fusion:
        with bz.Fusion(name="stable") as f:
            x = f.define_tensor((-1, -1))
            f.add_output(bz.ops.layer_norm(x) * 2.0)
        return f

    texts = []
    with config.scope(dump="kernel_ir", cache_dir=tmp_path):
        for _ in range(2):
            engine.forget_compiled_kernels()  # as a new process would: the kernel is compiled (or loaded) again
            build().execute([rng.standard_normal((3, 8), np.float32)])
            texts += _dumped(capsys, "kernel_ir")
    first, second = texts
    assert first == second  # no addresses or counters that change from one build to the next
    assert first.startswith("kernel stable(") and "task stable_t0_" in first
