"""Golden tests of the Fusion printer (`str(fusion)`, also `BRAZE_DUMP=fusion_ir`)."""

import textwrap

import braze as bz


def _golden(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def test_gelu_bias_with_reduction():
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        b = f.define_tensor((-1,), name="b")
        y = bz.ops.gelu(x + b)
        f.add_output(y)
        f.add_output(bz.ops.sum(y, axes=[1]))
    assert str(f) == _golden("""
        Fusion(
          inputs:
            T0: float32[T0_s0, T0_s1] label='x'
            T1: float32[T1_s0] label='b'
          exprs:
            T2: float32[b1, T1_s0] = broadcast(T1, is_new=(True, False))
            T3: float32[T0_s0, T0_s1] = add(T0, T2)
            T4: float32[T0_s0, T0_s1] = gelu(T3, approximate='none')
            T5: float32[T0_s0, rT0_s1] = sum(T4, axes=(1,))
          extent checks:
            T0_s1 == T1_s0
          outputs:
            T4: float32[T0_s0, T0_s1] new
            T5: float32[T0_s0, rT0_s1] new
        )
    """)


def test_scalars_aliases_layouts_and_static_extents():
    with bz.Fusion() as f:
        x = f.define_tensor((2, -1, 1, 3), bz.float16, stride_order=(3, 0, 2, 1))
        s = f.define_scalar(dtype=bz.float32, name="s")
        y = x * s + 1.5
        f.add_output(y, alias=x, hidden=True)
        f.add_output(x.permute(0, 2, 3, 1))
        f.add_output(bz.ops.cast(y, bz.float32), stride_order=(3, 0, 2, 1))
    assert str(f) == _golden("""
        Fusion(
          inputs:
            T0: float16[2, T0_s1, b1, 3] stride_order=(3, 0, 2, 1)
            T1: float32 scalar
          exprs:
            T2: float16[2, T0_s1, b1, 3] = mul(T0, T1)
            T4: float16[2, T0_s1, b1, 3] = add(T2, T3)
            T5: float16[2, b1, 3, T0_s1] = permute(T0, dims=(0, 2, 3, 1))
            T6: float32[2, T0_s1, b1, 3] = cast(T4, dtype=bz.float32)
          outputs:
            T4: float16[2, T0_s1, b1, 3] reuse_buffer of T0 hidden
            T5: float16[2, b1, 3, T0_s1] evaluate of T0
            T6: float32[2, T0_s1, b1, 3] new stride_order=(3, 0, 2, 1)
        )
    """)


def test_printer_is_stable_across_identical_definitions():
    def build() -> str:
        with bz.Fusion() as f:
            x = f.define_tensor((-1, 8))
            f.add_output(bz.ops.softmax(x[:, ::2], axis=-1))
        return str(f)

    first = build()
    assert first == build()
    assert "slice(T0, slices=((None, None, 1), (None, None, 2)))" in first
    assert "T1: float32[T0_s0, 4]" in first  # the static extent 8 sliced by 2 folds to 4
