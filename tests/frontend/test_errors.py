"""Every user-facing error, with its message: it names the argument, the expected and the actual."""

from __future__ import annotations

import re

import numpy as np
import pytest

import braze as bz


@pytest.fixture
def xb() -> bz.Fusion:
    """x: float32[-1, 4] with stride_order, b: float32[-1], k: int32 scalar."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1, 4), dtype=bz.float32, name="x")
        b = f.define_tensor((-1,), dtype=bz.float32, name="b")
        k = f.define_scalar(dtype=bz.int32, name="k")
        f.add_output(x * k + b)
    return f


def good_inputs() -> list:
    return [np.ones((3, 4), np.float32), np.ones(4, np.float32), 2]


def test_the_fixture_runs(xb: bz.Fusion) -> None:
    (y,) = xb.execute(good_inputs())
    np.testing.assert_array_equal(y, np.full((3, 4), 3, np.float32))


def test_error_hierarchy() -> None:
    for cls in (bz.FusionDefinitionError, bz.InputError, bz.UnsupportedError):
        assert issubclass(cls, bz.Error)
    assert issubclass(bz.FusionDefinitionError, ValueError) and issubclass(bz.InputError, ValueError)
    assert issubclass(bz.UnsupportedError, NotImplementedError)


# --- execute-time errors ------------------------------------------------------------------------
@pytest.mark.parametrize("count", [0, 2, 4])
def test_wrong_number_of_inputs(xb: bz.Fusion, count: int) -> None:
    inputs = (good_inputs() + [1.0])[:count]
    with pytest.raises(bz.InputError, match=rf"inputs: expected 3 inputs, got {count}$"):
        xb.execute(inputs)


@pytest.mark.parametrize("inputs", [np.ones(3, np.float32), "abc", 3])
def test_inputs_not_a_sequence(xb: bz.Fusion, inputs: object) -> None:
    with pytest.raises(bz.InputError, match=rf"inputs: expected a list of 3 inputs, got {type(inputs).__name__}"):
        xb.execute(inputs)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.complex64, np.uint8])
def test_wrong_dtype(xb: bz.Fusion, dtype) -> None:
    inputs = good_inputs()
    inputs[1] = inputs[1].astype(dtype)
    with pytest.raises(bz.InputError, match=rf"^input 1 \('b'\): expected float32, got {np.dtype(dtype).name}$"):
        xb.execute(inputs)


def test_wrong_dtype_message_from_the_design(xb: bz.Fusion) -> None:
    inputs = good_inputs()
    inputs[1] = np.ones(4, np.float64)
    with pytest.raises(bz.InputError) as info:
        xb.execute(inputs)
    assert str(info.value) == "input 1 ('b'): expected float32, got float64"


def test_unlabelled_input_is_named_by_its_ir_name() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,))
        f.add_output(x + 1)
    with pytest.raises(bz.InputError, match=rf"^input 0 \({x.name}\): expected float32, got int64"):
        f.execute([np.ones(2, np.int64)])


@pytest.mark.parametrize("shape", [(12,), (1, 3, 4), ()])
def test_wrong_rank(xb: bz.Fusion, shape: tuple) -> None:
    inputs = good_inputs()
    inputs[0] = np.ones(shape, np.float32)
    with pytest.raises(bz.InputError, match=rf"input 0 \('x'\): expected rank 2 .*got rank {len(shape)} "
                                            rf"{re.escape(f'(shape {shape})')}$"):
        xb.execute(inputs)


def test_static_extent_mismatch(xb: bz.Fusion) -> None:
    inputs = good_inputs()
    inputs[0] = np.ones((3, 5), np.float32)
    with pytest.raises(bz.InputError, match=r"^input 0 \('x'\): expected extent 4 at dimension 1, got 5 "
                                            r"\(shape \(3, 5\)\)$"):
        xb.execute(inputs)


@pytest.mark.parametrize("value, kind", [("abc", "str"), ([1.0, 2.0, 3.0, 4.0], "list"), (None, "NoneType"),
                                         (4.0, "float")])
def test_non_array_input(xb: bz.Fusion, value: object, kind: str) -> None:
    inputs = good_inputs()
    inputs[1] = value
    with pytest.raises(bz.InputError, match=rf"^input 1 \('b'\): expected an array .*got {kind}$"):
        xb.execute(inputs)


def test_stride_order_mismatch() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x", stride_order=(0, 1))  # column-major
        f.add_output(x * 2)
    a = np.ones((3, 4), np.float32)
    (y,) = f.execute([np.asfortranarray(a)])
    np.testing.assert_array_equal(y, 2 * a)
    with pytest.raises(bz.InputError, match=r"^input 0 \('x'\): expected stride_order \(0, 1\), got strides "
                                            r"\(16, 4\) \(stride_order \(1, 0\)\)$"):
        f.execute([a])


@pytest.mark.parametrize("value, text", [(1.5, "float 1.5"), (2.0, "float 2.0"), (np.float32(0.5), "float 0.5")])
def test_float_given_for_an_int_scalar(xb: bz.Fusion, value: object, text: str) -> None:
    inputs = good_inputs()
    inputs[2] = value
    with pytest.raises(bz.InputError, match=rf"^input 2 \('k'\): expected an int32 scalar, got {text}$"):
        xb.execute(inputs)


def test_int_given_for_a_bool_scalar() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.bool_, name="x")
        f.add_output(x & f.define_scalar(dtype=bz.bool_, name="flag"))
    with pytest.raises(bz.InputError, match=r"^input 1 \('flag'\): expected a bool scalar, got int 2$"):
        f.execute([np.ones(2, bool), 2])


@pytest.mark.parametrize("value, kind", [("2", "str"), (np.ones(2), "ndarray"), (None, "NoneType")])
def test_non_scalar_given_for_a_scalar(xb: bz.Fusion, value: object, kind: str) -> None:
    inputs = good_inputs()
    inputs[2] = value
    with pytest.raises(bz.InputError, match=rf"^input 2 \('k'\): expected an int32 scalar, got {kind}$"):
        xb.execute(inputs)


def test_scalar_inputs_accept_lower_kinds_and_0d_arrays(xb: bz.Fusion) -> None:
    for k in (True, np.int64(2), np.array(2)):
        inputs = good_inputs()
        inputs[2] = k
        (y,) = xb.execute(inputs)
        np.testing.assert_array_equal(y, np.full((3, 4), int(k) + 1, np.float32))


def test_int_scalar_out_of_range() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.int8, name="x")
        f.add_output(x + f.define_scalar(dtype=bz.int8, name="k"))
    with pytest.raises(bz.InputError, match=r"input 1 \('k'\): expected an int8 scalar.*1000"):
        f.execute([np.ones(2, np.int8), 1000])


def test_runtime_extent_mismatch_names_both_inputs() -> None:
    with bz.Fusion() as f:
        a = f.define_tensor((-1, -1), name="a")
        b = f.define_tensor((-1,), name="b")
        f.add_output(a - b)
    with pytest.raises(bz.InputError, match=r"^sub: dimension -1 of T\d+ \('a'\) and T\d+ \('b'\) must match: "
                                            r"got extents 4 and 5$"):
        f.execute([np.ones((3, 4), np.float32), np.ones(5, np.float32)])


def test_a_mismatch_names_the_inputs_not_the_broadcast_braze_made() -> None:
    with bz.Fusion() as f:
        a = f.define_tensor((-1, -1))
        b = f.define_tensor((-1,))  # rank-aligned to a by a broadcast view of b
        f.add_output(a + b)
    names = (a.name, b.name)
    with pytest.raises(bz.InputError, match=rf"^add: dimension -1 of {names[0]} and {names[1]} must match: "
                                            r"got extents 4 and 5$"):
        f.execute([np.ones((3, 4), np.float32), np.ones(5, np.float32)])
    with bz.Fusion() as g:
        a = g.define_tensor((-1, 3), name="a")
        b = g.define_tensor((4,), name="b")
        with pytest.raises(bz.FusionDefinitionError, match=rf"of {a.name} \('a'\) and {b.name} \('b'\) must match"):
            a + b  # noqa: B018


@pytest.mark.parametrize("kwargs, error, text", [
    ({"backend": "nope"}, bz.UnsupportedError, r"backend: expected one of \['cuda', 'llvm', 'reference'\], got 'nope'"),
    ({"device": "gpu"}, bz.InputError, r"device: expected None, 'cpu', 'cuda' or 'cuda:N', got 'gpu'"),
    ({"device": "cuda:x"}, bz.InputError, r"device: expected None, 'cpu', 'cuda' or 'cuda:N', got 'cuda:x'"),
    ({"backend": "cuda"}, bz.UnsupportedError, r"backend 'cuda': expected GPU arrays .* got host arrays"),
])
def test_unknown_backend_or_device(xb: bz.Fusion, kwargs: dict, error: type, text: str) -> None:
    with pytest.raises(error, match=text):
        xb.execute(good_inputs(), **kwargs)


def test_known_backend_and_device_run(xb: bz.Fusion) -> None:
    (y,) = xb.execute(good_inputs(), backend="reference", device="cpu")
    assert y.shape == (3, 4)


# --- definition errors ---------------------------------------------------------------------------
def test_static_extents_that_cannot_broadcast() -> None:
    with bz.Fusion() as f:
        a = f.define_tensor((-1, 3), name="a")
        b = f.define_tensor((4,), name="b")
        with pytest.raises(bz.FusionDefinitionError,
                           match=r"^add: dimension -1 of T\d+ \('a'\) and T\d+ \('b'\) must match: "
                                 r"got extents 3 and 4$"):
            a + b  # noqa: B018


@pytest.mark.parametrize("axes, text", [(5, "got 5"), (-3, "got -3"), ([0, 2], "got 2")])
def test_reduction_axis_out_of_range(axes, text: str) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        with pytest.raises(bz.FusionDefinitionError, match=rf"^sum axes: expected an axis in \[-2, 2\), {text}$"):
            bz.ops.sum(x, axes=axes)


@pytest.mark.parametrize("axes", [[1, 1], [1, -1], (0, 0, 1)])
def test_duplicate_axes(axes) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        expected = re.escape(f"max: expected distinct axes, got {list(axes)}")
        with pytest.raises(bz.FusionDefinitionError, match=rf"^{expected}$"):
            bz.ops.max(x, axes=axes)


def test_axis_out_of_range_in_views() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        with pytest.raises(bz.FusionDefinitionError, match=r"permute dims: expected an axis in \[-2, 2\), got 2"):
            x.permute(0, 2)
        with pytest.raises(bz.FusionDefinitionError, match=r"flip axes: expected an axis in \[-2, 2\), got 7"):
            x.flip(7)


MASK_HINT = r"; cast a mask to numbers first \(mask.astype\(x.dtype\), mask.float\(\)\)"


@pytest.mark.parametrize("op, dtype, text", [
    (bz.ops.bitwise_and, bz.float32, "expected a bool or integer dtype, got float32"),
    (bz.ops.bitwise_or, bz.bfloat16, "expected a bool or integer dtype, got bfloat16"),
    (bz.ops.left_shift, bz.bool_, "expected an integer dtype, got bool" + MASK_HINT),
    (bz.ops.sub, bz.bool_, "expected an integer or floating dtype, got bool" + MASK_HINT),
    (bz.ops.floordiv, bz.bool_, "expected an integer or floating dtype, got bool" + MASK_HINT),
])
def test_dtype_an_op_rejects(op, dtype: bz.DType, text: str) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=dtype, name="x")
        with pytest.raises(bz.FusionDefinitionError, match=rf"^{op.__name__}: T\d+ \('x'\): {text}$"):
            op(x, x)


def test_operators_reject_dtypes_too() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32, name="x")
        m = f.define_tensor((-1,), dtype=bz.bool_, name="m")
        with pytest.raises(bz.FusionDefinitionError, match=r"bitwise_and: T\d+ \('x'\)"):
            x & x  # noqa: B018
        with pytest.raises(bz.FusionDefinitionError, match=r"sub: T\d+ \('m'\)"):
            m - m  # noqa: B018
        with pytest.raises(bz.FusionDefinitionError, match=r"neg: T\d+ \('m'\)"):
            -m  # noqa: B018


def test_promoted_type_is_checked_too() -> None:
    """int8 & float scalar: each operand is fine alone, the promoted float32 is not."""
    with bz.Fusion() as f:
        i = f.define_tensor((-1,), dtype=bz.int8, name="i")
        with pytest.raises(bz.FusionDefinitionError, match=r"bitwise_and: the promoted type float32: "
                                                           r"expected a bool or integer dtype, got float32"):
            i & 1.5  # noqa: B018


def test_alias_between_incompatible_dtypes() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32, name="x")
        m = f.define_tensor((-1,), dtype=bz.bool_, name="m")
        with pytest.raises(bz.FusionDefinitionError,
                           match=r"add_output: alias between incompatible shapes: T\d+ is bool\[.*\], input T\d+ "
                                 r"\('x'\) is float32\["):
            f.add_output(m, alias=x)


def test_alias_between_incompatible_ranks() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        y = f.define_tensor((-1, -1), name="y")
        with pytest.raises(bz.FusionDefinitionError, match=r"alias between incompatible shapes: .* input T\d+ \('x'\)"):
            f.add_output(y * 2, alias=x)


def test_alias_between_incompatible_static_extents() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, 3), name="x")
        with pytest.raises(bz.FusionDefinitionError,
                           match=r"alias between incompatible shapes: dimension 1 of T\d+ and input T\d+ \('x'\): "
                                 r"got extents 2 and 3"):
            f.add_output(x[:, :2], alias=x)


def test_alias_between_symbolic_extents_is_checked_at_execute() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        y = f.define_tensor((-1,), name="y")
        f.add_output(y * 2, alias=x)
    with pytest.raises(bz.InputError, match=r"alias between incompatible shapes: dimension 0 .*'x'.*got extents"):
        f.execute([np.ones(3, np.float32), np.ones(4, np.float32)])


def test_alias_to_a_non_input() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        s = f.define_scalar(dtype=bz.float32, name="s")
        y = x * 2
        with pytest.raises(bz.FusionDefinitionError, match=rf"^add_output: alias: expected an input tensor of this "
                                                           rf"fusion, got {y.name}$"):
            f.add_output(x + 1, alias=y)
        with pytest.raises(bz.FusionDefinitionError, match="alias: expected an input tensor of this fusion"):
            f.add_output(s * 2, alias=s)
    with bz.Fusion() as g:
        z = g.define_tensor((-1,), name="z")
        with pytest.raises(bz.FusionDefinitionError, match="belongs to another fusion"):
            g.add_output(z, alias=x)


@pytest.mark.parametrize("build", [lambda x: x @ x, lambda x: 2 @ x, lambda x: x.__matmul__(x)])
def test_matmul_is_refused_saying_what_to_write(build) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        with pytest.raises(bz.UnsupportedError, match=r"no matrix-product op.*einsum\('ij,jk->ik'|a \* b"):
            build(x)


@pytest.mark.parametrize("name, text", [("gather", r"bz\.ops\.take_along_axis"), ("matmul", "matrix products"),
                                        ("iota", r"write bz\.ops\.arange"), ("welford", r"bz\.ops\.var_mean"),
                                        ("size", r"x\.size\(dim\)"), ("digamma", "outside the fusion")])
def test_nvfusers_ops_braze_lacks_say_what_to_write(name: str, text: str) -> None:
    with pytest.raises(bz.UnsupportedError, match=rf"^bz\.ops\.{name}: braze has no op of this name .*{text}"):
        getattr(bz.ops, name)
    assert not hasattr(bz.ops, name) and not hasattr(bz.ops, "no_such_op")  # an AttributeError too


def test_the_spellings_suggested_for_nvfusers_ops_exist() -> None:
    from braze.ops.nvfuser_names import SPELLED_OTHERWISE

    suggested = {n for why in SPELLED_OTHERWISE.values() for n in re.findall(r"bz\.ops\.(\w+)", why)}
    assert suggested and all(callable(getattr(bz.ops, n)) for n in suggested), suggested


@pytest.mark.parametrize("op, name", [
    (lambda: bz.ops.arange(3), "arange"),
    (lambda: bz.ops.full((2,), 1.0), "full"),
    (lambda: bz.ops.rand((2,)), "rand"),
    (lambda: bz.ops.randn((2,)), "randn"),
])
def test_creation_op_outside_a_fusion(op, name: str) -> None:
    with pytest.raises(bz.FusionDefinitionError, match=rf"^{name}: no fusion is being defined"):
        op()


@pytest.mark.parametrize("op, name", [(lambda: bz.ops.zeros((2,)), "zeros"), (lambda: bz.ops.ones((2,)), "ones")])
def test_zeros_outside_a_fusion_names_zeros(op, name: str) -> None:
    with pytest.raises(bz.FusionDefinitionError, match=rf"^{name}: no fusion is being defined"):
        op()


def test_creation_op_after_the_with_block() -> None:
    with bz.Fusion() as f:
        f.define_tensor((-1,))
    with pytest.raises(bz.FusionDefinitionError, match="no fusion is being defined"):
        bz.ops.zeros((2,))


def test_mixing_tensors_of_two_fusions() -> None:
    with bz.Fusion() as f1:
        p = f1.define_tensor((-1,), name="p")
    with bz.Fusion() as f2:
        q = f2.define_tensor((-1,), name="q")
        with pytest.raises(bz.FusionDefinitionError, match=r"^add: T\d+ .*belongs to another fusion"):
            q + p  # noqa: B018
        with pytest.raises(bz.FusionDefinitionError, match=r"^mul: T\d+ .*belongs to another fusion"):
            p * q  # noqa: B018
        with pytest.raises(bz.FusionDefinitionError, match=r"^add_output: T\d+ .*belongs to another fusion"):
            f2.add_output(p)


def test_mixing_tensors_names_the_foreign_tensor_by_label() -> None:
    with bz.Fusion() as f1:
        p = f1.define_tensor((-1,), name="p")
    with bz.Fusion() as f2:
        q = f2.define_tensor((-1,), name="q")
        with pytest.raises(bz.FusionDefinitionError, match=r"\('p'\) belongs to another fusion"):
            q + p  # noqa: B018


@pytest.mark.parametrize("shape, text", [
    ((-2,), r"shape\[0\]: expected -1 or an extent >= 0, got -2"),
    ((3, 1.5), r"shape\[1\]: expected -1 or an extent >= 0, got 1.5"),
    ((True,), r"shape\[0\]: expected -1 or an extent >= 0, got True"),
    ((2, "3"), r"shape\[1\]: expected -1 or an extent >= 0, got '3'"),
    (3, r"shape: expected a sequence of ints, got 3"),
    (None, r"shape: expected a sequence of ints, got None"),
])
def test_bad_define_tensor_shape(shape, text: str) -> None:
    with bz.Fusion() as f:
        with pytest.raises(bz.FusionDefinitionError, match=rf"^define_tensor: {text}$"):
            f.define_tensor(shape)


@pytest.mark.parametrize("order", [(0, 0), (0, 1, 2), (1, 2), (0,)])
def test_bad_stride_order(order: tuple) -> None:
    with bz.Fusion() as f:
        with pytest.raises(bz.FusionDefinitionError, match=rf"^stride_order of T\d+ \('x'\): expected a permutation "
                                                           rf"of 0..1, got {re.escape(repr(order))}$"):
            f.define_tensor((-1, -1), name="x", stride_order=order)


def test_bad_stride_order_on_an_output() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        with pytest.raises(bz.FusionDefinitionError, match=r"expected a permutation of 0..1, got \(2, 0\)"):
            f.add_output(x * 2, stride_order=(2, 0))


def test_nvfusers_contiguity_flags_are_taken_and_any_layout_runs() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), bz.float32, contiguity=[True, True], name="x")
        b = f.define_tensor((1, -1), bz.float32, contiguity=[None, True])
        f.add_output(x + b)
    x_np, b_np = np.arange(12.0, dtype=np.float32).reshape(3, 4), np.ones((1, 3), np.float32)
    (y,) = f.execute([x_np.T, b_np])  # flags are no promise braze relies on: a transposed x runs
    np.testing.assert_array_equal(y, x_np.T + 1)


@pytest.mark.parametrize("call, text", [
    (lambda f: f.define_tensor((-1, -1), [True, True], contiguity=True), r"expected one contiguity, got "
                                                                          r"\[True, True\] in place of the dtype"),
    (lambda f: f.define_tensor(sizes=(2, 1), strides=(1,)), r"strides: expected 2 strides, one per size, got \(1,\)"),
    (lambda f: f.define_tensor((-1,), sizes=(2,)), r"sizes=, strides=: expected sizes .* in place of shape"),
    (lambda f: f.define_tensor((-1, -1), contiguity=[True]), r"contiguity: expected a bool or one .* 2 dimensions"),
    (lambda f: f.define_tensor((-1,), contiguity=[1]), r"contiguity: expected a bool or one flag .*, got \[1\]"),
])
def test_bad_contiguity(call, text: str) -> None:
    with bz.Fusion() as f:
        with pytest.raises(bz.FusionDefinitionError, match=rf"^define_tensor: {text}"):
            call(f)


@pytest.mark.parametrize("dtype, shown", [("complex64", "complex64"), (np.complex128, "complex128"),
                                          ("float33", "'float33'")])
def test_bad_define_tensor_dtype(dtype, shown: str) -> None:
    with bz.Fusion() as f:
        with pytest.raises(bz.UnsupportedError, match=rf"^dtype: expected one of bool, .*float64, got {shown}$"):
            f.define_tensor((-1,), dtype=dtype)


def test_bad_define_scalar() -> None:
    with bz.Fusion() as f:
        with pytest.raises(bz.FusionDefinitionError, match=r"define_scalar: value: expected bool, int or float, "
                                                           r"got '2'"):
            f.define_scalar("2")
        with pytest.raises(bz.UnsupportedError, match="got complex64"):
            f.define_scalar(dtype="complex64")


def test_bad_operand() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        with pytest.raises(bz.FusionDefinitionError, match=r"add: operand 1: expected a TensorView or a Python "
                                                           r"scalar, got str"):
            x + "a"  # noqa: B018
        with pytest.raises(bz.FusionDefinitionError, match=r"add_output: expected a TensorView, got float"):
            f.add_output(1.0)


def test_symbolic_tensors_have_no_truth_value() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), name="x")
        with pytest.raises(bz.TracerBoolConversionError, match=r"^bool\(T\d+\): .*no truth value"):
            bool(x > 0)
        assert issubclass(bz.TracerBoolConversionError, TypeError)  # what it raised before it was a bz.Error


def test_define_scalar_constant_of_a_higher_kind_than_its_dtype() -> None:
    with bz.Fusion() as f:
        with pytest.raises(bz.FusionDefinitionError, match=r"define_scalar: .*int32.*1\.5"):
            f.define_scalar(1.5, dtype=bz.int32)


def test_define_scalar_constant_out_of_range() -> None:
    with bz.Fusion() as f:
        with pytest.raises(bz.FusionDefinitionError, match=r"define_scalar: .*int8.*300"):
            f.define_scalar(300, dtype=bz.int8)


def test_int_index_out_of_range_names_the_index_and_the_tensor() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((3,), name="x")
        with pytest.raises(bz.FusionDefinitionError) as info:
            x[5]  # noqa: B018
    assert "'x'" in str(info.value) and "5" in str(info.value)


def test_jit_unsupported_dtype_names_the_argument() -> None:
    @bz.jit
    def double(x):
        return x * 2

    with pytest.raises(bz.Error, match=r"argument 'x'.*complex64"):
        double(np.ones(2, np.complex64))


def test_indexing_by_a_mask_or_a_float_is_refused_by_name() -> None:
    """`table[mask]` has a length the data decide, and a float is no index: each error names the index."""
    with bz.Fusion() as f:
        table = f.define_tensor((-1, -1), name="table")
        mask = f.define_tensor((-1,), dtype=bz.bool_, name="mask")
        with pytest.raises(bz.UnsupportedError, match=r"^indexing T0 \('table'\): index 0: expected ints, slices, "
                                                      r"None, '...' or one integer array, got a boolean mask"):
            table[mask]
        with pytest.raises(bz.UnsupportedError, match=r"index 1: expected ints, slices, None, '...' or one integer "
                                                      r"array, got float 1.5$"):
            table[..., 1.5]
