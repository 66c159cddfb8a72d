"""Input interop: strided, broadcast, zero-size and 0-d arrays, `__array_interface__` and `__dlpack__`
objects, and torch CPU tensors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz
from braze.runtime.inputs import stride_order_of


def affine_fusion(dtype=bz.float64) -> bz.Fusion:
    """y = x * 2 + b (x: [-1, -1], b: [-1]) and s = sum(x, axis 0)."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), dtype=dtype, name="x")
        b = f.define_tensor((-1,), dtype=dtype, name="b")
        f.add_output(x * 2 + b)
        f.add_output(bz.ops.sum(x, axes=[0]))
    return f


def check_affine(x: np.ndarray, b: np.ndarray, outs) -> None:
    y, s = (np.asarray(o) for o in outs)
    np.testing.assert_array_equal(y, x * 2 + b)
    np.testing.assert_allclose(s, x.sum(0), rtol=1e-12)
    assert y.shape == np.broadcast_shapes(x.shape, b.shape)


def base(*shape: int, dtype=np.float64) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape) - 7


NON_CONTIGUOUS = {
    "transposed": lambda: base(4, 3).T,
    "step 2": lambda: base(6, 3)[::2],
    "column step": lambda: base(3, 8)[:, 1::3],
    "reversed rows": lambda: base(3, 4)[::-1],
    "reversed both": lambda: base(3, 4)[::-1, ::-1],
    "negative step 2": lambda: base(3, 9)[:, ::-2][:, :4],
    "fortran": lambda: np.asfortranarray(base(3, 4)),
    "sub-block": lambda: base(7, 9)[2:5, 3:7],
}


@pytest.mark.parametrize("name", list(NON_CONTIGUOUS))
def test_non_contiguous_inputs(name: str) -> None:
    x = NON_CONTIGUOUS[name]()
    assert not x.flags.c_contiguous or name == "sub-block"
    b = base(12)[::-3][: x.shape[1]]
    snapshot_x, snapshot_b = x.copy(), b.copy()
    check_affine(x, b, affine_fusion().execute([x, b]))
    np.testing.assert_array_equal(x, snapshot_x)  # inputs are read only
    np.testing.assert_array_equal(b, snapshot_b)


@st.composite
def strided_views(draw):
    m, n = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    a = base(m, n)
    index = []
    for extent in (m, n):
        step = draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))
        start = draw(st.one_of(st.none(), st.integers(-extent, extent - 1)))
        index.append(slice(start, None, step))
    view = a[tuple(index)]
    return view.T if draw(st.booleans()) else view


@settings(max_examples=100, deadline=None)
@given(strided_views())
def test_random_strided_views(x: np.ndarray) -> None:
    b = np.linspace(-1, 1, x.shape[1])
    check_affine(x, b, affine_fusion().execute([x, b]))


def test_broadcast_stride_0_inputs() -> None:
    x = np.broadcast_to(base(1, 4), (5, 4))
    b = np.broadcast_to(np.float64(3.0), (4,))
    assert x.strides[0] == 0 and b.strides == (0,)
    check_affine(x, b, affine_fusion().execute([x, b]))
    col = np.broadcast_to(base(3, 1), (3, 4))
    check_affine(col, base(4), affine_fusion().execute([col, base(4)]))


def test_broadcast_input_against_a_stride_order() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), dtype=bz.float64, name="x", stride_order=(0, 1))
        f.add_output(x + 1)
    a = np.broadcast_to(base(3, 1), (3, 4))  # strides (8, 0): column-major-compatible
    (y,) = f.execute([a])
    np.testing.assert_array_equal(y, a + 1)


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)])
def test_zero_size_inputs(shape: tuple[int, int]) -> None:
    x = np.zeros(shape)
    b = np.ones(shape[1])
    y, s = affine_fusion().execute([x, b])
    assert y.shape == shape and s.shape == (shape[1],)
    np.testing.assert_array_equal(s, np.zeros(shape[1]))


def test_zero_size_input_to_an_empty_max_is_an_input_error() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), name="x")
        f.add_output(bz.ops.max(x, axes=[0]))
    with pytest.raises(bz.InputError, match=r"max: T\d+ \('x'\) has an empty dimension"):
        f.execute([np.zeros((0, 3), np.float32)])
    (y,) = f.execute([np.zeros((3, 0), np.float32)])  # nothing empty is reduced
    assert y.shape == (0,)


def test_0d_inputs() -> None:
    with bz.Fusion() as f:
        s = f.define_tensor((), dtype=bz.float32, name="s")
        x = f.define_tensor((-1,), dtype=bz.float32, name="x")
        f.add_output(s * 2)
        f.add_output(x + s)
    outs = f.execute([np.array(3.0, np.float32), np.arange(3, dtype=np.float32)])
    assert isinstance(outs[0], np.ndarray) and outs[0].shape == () and outs[0].dtype == np.float32
    assert float(outs[0]) == 6.0
    np.testing.assert_array_equal(outs[1], np.arange(3) + 3.0)
    outs = f.execute([np.float32(1.5), np.arange(2, dtype=np.float32)])  # a NumPy scalar is a 0-d array
    assert float(outs[0]) == 3.0


class ArrayInterfaceOnly:
    """Exposes memory only through `__array_interface__` (keeps its buffer alive)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array
        self.__array_interface__ = array.__array_interface__


class DLPackOnly:
    """Exposes memory only through `__dlpack__`."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)


class DLPackWithDevice(DLPackOnly):
    def __init__(self, array: np.ndarray, device: tuple[int, int] | None = None) -> None:
        super().__init__(array)
        self.device = device

    def __dlpack_device__(self):
        return self.device or self._array.__dlpack_device__()


@pytest.mark.parametrize("wrap", [ArrayInterfaceOnly, DLPackOnly, DLPackWithDevice], ids=lambda c: c.__name__)
def test_array_protocol_objects(wrap) -> None:
    assert not isinstance(wrap(base(1)), np.ndarray)
    x, b = base(3, 4), base(4)
    outs = affine_fusion().execute([wrap(x), wrap(b)])
    assert all(type(o) is np.ndarray for o in outs)
    check_affine(x, b, outs)
    t = base(4, 3).T  # strided memory through the protocol
    check_affine(t, b, affine_fusion().execute([wrap(t), b]))


@pytest.mark.parametrize("wrap", [ArrayInterfaceOnly, DLPackOnly], ids=lambda c: c.__name__)
def test_array_protocol_objects_share_memory(wrap) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float64, name="x")
        f.add_output(x + 1, alias=x)
        f.add_output(x[::-1])
    a = base(4)
    updated, view = f.execute([wrap(a)])
    np.testing.assert_array_equal(a, base(4) + 1)  # written in place through the protocol
    assert np.shares_memory(updated, a) and np.shares_memory(view, a)


def test_an_array_its_protocol_cannot_carry_is_an_input_error() -> None:
    """What DLPack cannot carry (the other byte order) or a broken `__array_interface__` raised the
    producer's or NumPy's bare error; now an InputError naming the input, with that error."""
    broken = ArrayInterfaceOnly(base(3))
    broken.__array_interface__ = {"shape": (3,), "typestr": "<f8", "data": (0, False), "version": 3}
    f = affine_fusion()
    with pytest.raises(bz.InputError, match=r"input 1 \('b'\): could not read the array \(DLPackOnly\) through "
                                            r"__dlpack__: BufferError: .*byte order"):
        f.execute([base(2, 3), DLPackOnly(base(3).astype(">f8"))])
    with pytest.raises(bz.InputError, match=r"input 1 \('b'\): could not read the array \(ArrayInterfaceOnly\) "
                                            r"through __array_interface__: ValueError: data is NULL"):
        f.execute([base(2, 3), broken])


def test_dlpack_on_another_device_is_unsupported() -> None:
    f = affine_fusion()
    with pytest.raises(bz.UnsupportedError, match=r"input 0 \('x'\): expected a host array, got a DLPack array on "
                                                  r"device type 2"):
        f.execute([DLPackWithDevice(base(2, 2), (2, 0)), base(2)])


def test_host_and_cuda_arrays_do_not_mix() -> None:
    class FakeCuda:  # a null pointer: binding reads its interface, and nothing runs
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f8", "data": (0, False), "version": 3}

    f = affine_fusion()
    with pytest.raises(bz.InputError, match=r"inputs: expected every array on one device, got input 0 on cpu, "
                                            r"input 1 on cuda:0"):
        f.execute([base(2, 2), FakeCuda()])


def test_stride_order_of() -> None:
    assert stride_order_of(base(2, 3, 4)) == (2, 1, 0)
    assert stride_order_of(base(2, 3, 4).transpose(2, 0, 1)) == (0, 2, 1)
    assert stride_order_of(np.asfortranarray(base(3, 4))) == (0, 1)
    assert stride_order_of(base(3, 4)[::-1]) == (1, 0)
    assert stride_order_of(np.zeros(())) == ()


@pytest.mark.parametrize("dtype", [d.numpy for d in bz.dtypes.ALL_DTYPES], ids=lambda d: np.dtype(d).name)
def test_every_dtype_round_trips(dtype) -> None:
    d = bz.dtypes.from_numpy(np.dtype(dtype))
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=d, name="x")
        f.add_output(bz.ops.where(x == x, x, x))
        f.add_output(x[::-1])
    a = (np.arange(5) % 2).astype(dtype)[::-1]
    y, r = f.execute([a])
    assert y.dtype == a.dtype and r.dtype == a.dtype
    np.testing.assert_array_equal(y, a)
    np.testing.assert_array_equal(r, a[::-1])


@pytest.mark.parametrize("swapped", [np.arange(3, dtype=">f4"), np.arange(3, dtype="<f4").byteswap().view(">f4")],
                         ids=["big-endian", "byteswapped view"])
def test_the_other_byte_order_is_named_with_its_fix(swapped: np.ndarray) -> None:
    """'>f4' is a float32 to whoever wrote it: every entry point says that its byte order is what
    braze refuses, and how to get one it reads."""
    with bz.Fusion() as f:
        f.add_output(f.define_tensor((-1,), dtype=bz.float32, name="x") * 2)

    @bz.kernel
    def double(x: bz.Array[bz.float32, 1]):
        for i in range(x.shape[0]):
            x[i] *= 2.0

    fix = r"got >f4 \(float32 in the other byte order; \.astype\('float32'\) makes a copy braze reads\)"
    with pytest.raises(bz.InputError, match=r"input 0 \('x'\): expected float32, " + fix):
        f.execute([swapped])
    with pytest.raises(bz.UnsupportedError, match=r"argument 'x': dtype: expected one of .*, " + fix):
        bz.jit(lambda x: x * 2)(swapped)
    with pytest.raises(bz.InputError, match=r"argument 'x': expected float32, " + fix):
        double(swapped)
    np.testing.assert_array_equal(swapped, np.arange(3))


def test_a_record_field_written_in_place_is_refused() -> None:
    """A field of a packed record array (strides of no whole element) is read from a copy, so an
    output written into it in place would be lost in that copy: refused, as read-only arrays are."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32, name="x")
        f.add_output(x * 2)
    with bz.Fusion() as in_place:
        x = in_place.define_tensor((-1,), dtype=bz.float32, name="x")
        in_place.add_output(x + 1, alias=x)
    records = np.zeros(4, np.dtype([("tag", "u1"), ("x", "f4")]))
    records["x"] = np.arange(4)
    (doubled,) = f.execute([records["x"]])  # only read: the copy serves
    np.testing.assert_array_equal(doubled, np.arange(4) * 2)
    with pytest.raises(bz.InputError, match=r"input 0 \('x'\): expected strides of whole 4-byte elements for an "
                                            r"array an output is written into in place, got strides \(5,\)"):
        in_place.execute([records["x"]])
    np.testing.assert_array_equal(records["x"], np.arange(4))


# --- torch --------------------------------------------------------------------------------------
def test_torch_cpu_tensors_in_and_out() -> None:
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    b = torch.linspace(0, 1, 4, dtype=torch.float64)
    y, s = affine_fusion().execute([x, b])
    assert isinstance(y, torch.Tensor) and isinstance(s, torch.Tensor)
    assert torch.equal(y, x * 2 + b)
    assert torch.allclose(s, x.sum(0))
    y, _ = affine_fusion().execute([x.T.contiguous().T, b.numpy()])  # torch and NumPy together: torch out
    assert isinstance(y, torch.Tensor)


def test_torch_non_contiguous_and_requires_grad() -> None:
    torch = pytest.importorskip("torch")
    x = torch.arange(20, dtype=torch.float64).reshape(4, 5).T[::2]
    b = torch.ones(4, dtype=torch.float64, requires_grad=True)
    y, _ = affine_fusion().execute([x, b])
    assert torch.equal(y, x * 2 + b.detach())


def test_torch_bfloat16_and_in_place() -> None:
    torch = pytest.importorskip("torch")
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.bfloat16, name="x")
        f.add_output(x * 2)
        f.add_output(x + 1, alias=x)
    t = torch.arange(4, dtype=torch.bfloat16)
    doubled, updated = f.execute([t])
    assert doubled.dtype == torch.bfloat16
    assert torch.equal(doubled, torch.arange(4, dtype=torch.bfloat16) * 2)
    assert torch.equal(t, torch.arange(4, dtype=torch.bfloat16) + 1)
    assert updated.data_ptr() == t.data_ptr()


def test_torch_evaluate_alias_shares_memory() -> None:
    torch = pytest.importorskip("torch")
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), dtype=bz.float32, name="x")
        f.add_output(x.T)
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    (y,) = f.execute([t])
    assert isinstance(y, torch.Tensor) and y.data_ptr() == t.data_ptr()
    assert torch.equal(y, t.T)


def test_torch_flip_view_output() -> None:
    torch = pytest.importorskip("torch")
    with bz.Fusion() as f:
        x = f.define_tensor((-1,), dtype=bz.float32, name="x")
        f.add_output(x.flip(0))
    t = torch.arange(3, dtype=torch.float32)
    (y,) = f.execute([t])
    assert torch.equal(y, torch.flip(t, [0]))


def test_torch_bfloat16_evaluate_alias_shares_memory() -> None:
    torch = pytest.importorskip("torch")
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), dtype=bz.bfloat16, name="x")
        f.add_output(x.T)
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    (y,) = f.execute([t])
    assert torch.equal(y, t.T)
    assert y.data_ptr() == t.data_ptr() and y.stride() == (1, 3)


def test_torch_strided_output_layout_and_in_place() -> None:
    torch = pytest.importorskip("torch")
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1), dtype=bz.float32, name="x")
        f.add_output(x * 2, stride_order=(0, 1))
        f.add_output(x + 1, alias=x)
    t = torch.arange(6, dtype=torch.float32).reshape(3, 2).T
    doubled, updated = f.execute([t])
    assert doubled.stride() == (1, 2)
    assert torch.equal(doubled, (torch.arange(6.0).reshape(3, 2).T) * 2)
    assert updated.data_ptr() == t.data_ptr()
    assert torch.equal(t, torch.arange(6.0).reshape(3, 2).T + 1)


def _odd_torch_tensors(torch) -> dict:
    """Tensors whose memory is not their values as a strided array braze can read, by the error each
    gives (a bare torch error, or garbage, before)."""
    values = torch.arange(3, dtype=torch.float64)
    return {
        r"expected a tensor without torch's lazy negation bit.*\.resolve_neg\(\)": torch._neg_view(values),
        r"expected a dense \(strided\) tensor, got one of layout torch.sparse_coo": values.to_sparse(),
        r"expected one of bool, .*, got torch.float8_e4m3fn": values.to(torch.float8_e4m3fn),
        r"expected one of bool, .*, got torch.complex64": torch.ones(3, dtype=torch.complex64).conj(),
        r"expected a tensor on the CPU or a CUDA GPU, got one on meta": torch.empty(3, device="meta"),
    }


def test_odd_torch_tensors_are_refused_by_name() -> None:
    torch = pytest.importorskip("torch")
    f = affine_fusion()
    b = torch.ones(3, dtype=torch.float64)
    f.execute([torch.ones(2, 3, dtype=torch.float64), b])  # a first call, so the odd ones come second
    for message, odd in _odd_torch_tensors(torch).items():
        with pytest.raises(bz.Error, match=r"input 1 \('b'\): " + message):
            f.execute([torch.ones(2, 3, dtype=torch.float64), odd])


def test_torch_tensor_subclasses_are_torch_tensors() -> None:
    """A subclass of torch.Tensor is read as torch reads it (detached), and gives torch tensors back."""
    torch = pytest.importorskip("torch")

    class Tagged(torch.Tensor):
        pass

    x = torch.ones(2, 3, dtype=torch.float64, requires_grad=True).as_subclass(Tagged)
    y, s = affine_fusion().execute([x, torch.ones(3, dtype=torch.float64)])
    assert type(y) is torch.Tensor and torch.equal(y, torch.full((2, 3), 3.0, dtype=torch.float64))
