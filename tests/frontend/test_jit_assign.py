"""`x[index] = value` in a traced function, as NumPy and torch code writes arrays in place: the tensor
takes a new value, what used it before keeps the old one, and what braze cannot do as NumPy does (write
the caller's array, show the write through a view taken before) is refused (braze/ops/view_composites.py,
`assign`)."""

from __future__ import annotations

import numpy as np
import pytest
from fuzz_scale import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz


def _laplacian_inside(u):
    out = np.zeros_like(u)
    out[1:-1, 1:-1] = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
    return out


def _boundaries_and_clamp(u):
    v = u * 2
    v[0] = 0.0
    v[:, -1] = u[:, 0]
    v[u.shape[0] - 2, 0] = 3
    v[v > 1.5] = 1.5
    return v


def _old_value_kept(u):
    v = u.copy()
    before = v * 3  # computed from the value before the write
    v[2:4] = -1
    v[..., 0] = v[..., 1] * 2  # a view read on the right of its own write
    return v, before


def _integers_take_the_cast(u):
    counts = (u * 10).astype(np.int32)
    counts[1:, :2] = 2.7  # NumPy casts on assignment
    return counts


@pytest.mark.parametrize("program", [_laplacian_inside, _boundaries_and_clamp, _old_value_kept,
                                     _integers_take_the_cast])
def test_writes_into_a_traced_array_give_numpys_values(program) -> None:
    jitted = bz.jit(program)
    for shape in [(5, 6), (7, 4)]:
        u = np.random.default_rng(sum(shape)).random(shape)
        want, got = program(u.copy()), jitted(u)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,),
                        strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-12)


def test_torch_code_writes_a_clone() -> None:
    torch = pytest.importorskip("torch")

    def masked(x):
        y = x.clone()
        y[:, 0] = 0
        y[y > 0.5] = 0.5
        return y, x  # the clone's writes leave x alone

    x = torch.rand(4, 5, dtype=torch.float64)
    for got, want in zip(bz.jit(masked)(x), masked(x), strict=True):
        torch.testing.assert_close(got, want)


def test_what_numpy_would_do_otherwise_is_refused() -> None:
    def view_then_write(u):
        v = u + 0
        tail = v[1:]
        v[-1] = 5.0
        return tail  # NumPy's view shows the 5; a fusion's value cannot

    def out_of_range(u):
        v = u + 0
        v[5] = 1.0
        return v

    u = np.ones((3, 2))
    with pytest.raises(bz.UnsupportedError, match=r"is a view of T\d+ taken before T\d+\[\.\.\.\] = "):
        bz.jit(view_then_write)(u)
    with pytest.raises(bz.InputError, match=r"index 5 of dimension 0 must lie within its extent"):
        bz.jit(out_of_range)(u)
    with pytest.raises(bz.UnsupportedError, match=r"a step of 2 in dimension 0"):
        bz.jit(lambda u: _strided_write(u + 0))(u)
    with pytest.raises(bz.UnsupportedError, match=r"\[mask\] = T\d+: an array written through a mask"):
        bz.jit(_masked_array_write)(u)


def _masked_array_write(u):
    v = u + 0
    v[u > 0.5] = u * 2  # NumPy takes u * 2's elements in turn: its size must be the count of True places
    return v


def _strided_write(v):
    v[::2] = 0.0
    return v


def _jacobi_sweeps(u, f):
    for _ in range(6):
        un = u.copy()
        un[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 0.01 * f[1:-1, 1:-1])
        u = un
    return u


def test_a_write_keeps_the_extent_it_had() -> None:
    with bz.Fusion() as f:
        u = f.define_tensor(shape=(-1, -1), dtype=bz.float64)
        v = u + 0
        for _ in range(3):
            v[1:-1, 1:-1] = v[2:, 1:-1] * 2  # the cat's pieces tile the axis: its extent is u's
        assert [str(d) for d in v.shape] == [str(d) for d in u.shape]


def test_sweeps_in_a_python_loop_compile_in_time() -> None:
    # Each sweep reads the last one's cat at shifted indices: inlined, the code grows exponentially
    # with the sweeps, so the lowering gives a cat read too often a task of its own.
    rng = np.random.default_rng(3)
    jitted = bz.jit(_jacobi_sweeps)
    for n in (6, 9):
        u, f = rng.random((n, n)), rng.random((n, n))
        np.testing.assert_allclose(jitted(u, f), _jacobi_sweeps(u, f), rtol=1e-12)
    assert sum(len(v) for v in jitted.fusions.values()) == 1


@st.composite
def _writes(draw):
    """A shape, and writes into a copy of an array of it as NumPy code makes them: each an index of ints,
    step-1 slices (bounds negative, or empty ones) and maybe one '...', or a mask; and a value, a
    number, an array of the region's shape, or a row broadcasting to it."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    writes = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()) and draw(st.booleans()):
            writes.append(("mask", draw(st.floats(-1, 1, width=32)), draw(st.floats(-2, 2, width=32))))
            continue
        index = []
        for extent in shape:
            if draw(st.booleans()):
                index.append(draw(st.integers(-extent, extent - 1)))
            else:
                # within the extent: x[n:n + 1] of an extent n is empty in NumPy and, as any one-element
                # slice past its dimension, an InputError in braze (FusionGraph.one_element_extents)
                bounds = st.none() | st.integers(-extent, extent)
                index.append(slice(draw(bounds), draw(bounds)))
        if draw(st.booleans()):  # a '...' for a run of full slices
            at = draw(st.integers(0, len(index)))
            index = index[:at] + [Ellipsis] + [i for i in index[at:] if i != slice(None, None)]
        writes.append(("index", tuple(index), draw(st.sampled_from(["number", "region", "row"]))))
    return shape, writes


def _program(writes):
    def program(u, w):
        v = u * 1.0
        for kind, index, value in writes:
            if kind == "mask":
                v[v > index] = value
                continue
            region = u[index]  # of the region's shape
            v[index] = {"number": 0.5, "region": region * w, "row": np.ones(region.shape[-1:]) * w}[value]
        return v
    return program


@settings(max_examples=examples(40), deadline=None)
@given(_writes())
def test_random_writes_give_numpys_values(case) -> None:
    shape, writes = case
    program = _program(writes)
    rng = np.random.default_rng(len(writes))
    for grow in (0, 1):  # the same writes at a second size: the trace serves it or traces again
        u = rng.standard_normal(tuple(e + grow for e in shape))
        try:
            want = program(u.copy(), 2.0)
        except (IndexError, ValueError):  # out of range, or shapes that do not broadcast: braze refuses too
            with pytest.raises(bz.Error):
                bz.jit(program)(u, 2.0)
            continue
        np.testing.assert_allclose(bz.jit(program)(u, 2.0), want, rtol=1e-12)


def test_a_slice_of_a_one_element_slice_fills_it_on_an_empty_array() -> None:
    """`y[:1] = y[:1][:1]` of an empty array: the slice of the slice had an extent written otherwise
    (max(min(min(n, 1), 1) - ..., 0)), so the write broadcast it as one element and required it be 1."""
    def first_again(x):
        y = x.copy()
        y[0:1] = y[0:1][0:1] * 2
        return y

    jitted = bz.jit(first_again)
    for n in (0, 3):
        x = np.arange(n, dtype=np.float32) + 1
        np.testing.assert_array_equal(jitted(x), first_again(x))


def test_a_written_array_keeps_its_size_one_dimension_broadcasting() -> None:
    """`y[0:1] = 0.5` and `w[0, 1:] = -1` of a (1, n) array rebuilt it from slices and a cat whose extent
    1 no longer broadcast: adding a (2, n) array said the extents 1 and 2 must match."""
    def written(x, z):
        y = x.copy()
        y[0:1] = 0.5
        w = x.copy()
        w[0, 1:] = -1.0
        return y + z, w * z, y

    for n in (0, 3):
        x, z = np.ones((1, n), np.float32), np.arange(2 * n, dtype=np.float32).reshape(2, n)
        for got, want in zip(bz.jit(written)(x, z), written(x, z), strict=True):
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)
