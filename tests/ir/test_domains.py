"""IterDomain transforms, allocation domains and stride orders of TensorViews."""

import pytest

import braze as bz
from braze.ir import IterType, Merge, ParallelType, Reorder, Split


def _tensor(shape=(-1, -1), **kwargs):
    f = bz.Fusion()
    return f, f.define_tensor(shape, **kwargs)


def test_split_records_ceildiv_outer_and_factor_inner():
    _, t = _tensor((-1, 10))
    t.split(1, 4)
    assert [d.text() for d in t.loop] == ["T0_s0", "3", "4"]  # ceildiv(10, 4) folds to 3
    (transform,) = t.transforms
    assert isinstance(transform, Split) and transform.inp is t.logical[1]
    assert transform.outer is t.loop[1] and transform.inner is t.loop[2]
    assert [d.text() for d in t.logical] == ["T0_s0", "10"]  # the logical domain is untouched


def test_split_of_symbolic_extent_is_symbolic_ceildiv():
    _, t = _tensor()
    t.split(0, 8)
    assert str(t.loop[0].extent) == "ceildiv(T0_s0, 8)"
    assert t.loop[0].extent.evaluate({"T0_s0": 17}) == 3


def test_merge_then_split_then_reorder():
    _, t = _tensor((-1, 6))
    t.merge(0).split(0, 8).reorder({0: 1})
    kinds = [type(x) for x in t.transforms]
    assert kinds == [Merge, Split, Reorder]
    assert str(t.loop[1].extent) == "ceildiv(T0_s0 * 6, 8)"
    assert t.loop[0].extent.value == 8
    assert t.transforms[2].old_to_new == (1, 0)


def test_reorder_moves_only_named_dimensions():
    _, t = _tensor((2, 3, 5, 7))
    t.reorder({3: 0})
    assert [d.extent.value for d in t.loop] == [7, 2, 3, 5]
    with pytest.raises(bz.FusionDefinitionError, match="distinct destinations"):
        t.reorder({0: 1, 2: 1})


def test_merge_of_last_axis_is_an_error():
    _, t = _tensor()
    with pytest.raises(bz.FusionDefinitionError, match="no next loop dimension"):
        t.merge(1)
    with pytest.raises(bz.FusionDefinitionError, match=r"expected an axis in \[-2, 2\), got 2"):
        t.split(2, 4)


def test_stride_order_lays_nchw_out_as_nhwc():
    _, t = _tensor((-1, -1, -1, -1), stride_order=(3, 0, 2, 1))
    n, c, h, w = t.logical
    assert t.allocation == [n, h, w, c]
    assert t.stride_order == (3, 0, 2, 1)


def test_default_layout_has_no_stride_order():
    _, t = _tensor((-1, -1, -1))
    assert t.stride_order is None and t.has_default_allocation


@pytest.mark.parametrize("order", [(0, 0, 1), (0, 1), (1, 2, 3)])
def test_bad_stride_order(order):
    with pytest.raises(bz.FusionDefinitionError, match="expected a permutation of 0..2"):
        _tensor((-1, -1, -1), stride_order=order)


def test_allocation_domain_from_split_loop_domain():
    _, t = _tensor((-1, 10))
    t.split(1, 4)
    t.set_allocation_domain(t.loop)
    assert t.allocation == t.loop
    assert t.stride_order is None  # a split layout has no plain stride order


def test_allocation_domain_must_cover_logical_exactly_once():
    _, t = _tensor((-1, 10))
    t.split(1, 4)
    with pytest.raises(bz.FusionDefinitionError, match="cover the logical domain"):
        t.set_allocation_domain([t.logical[0], t.loop[1]])  # misses the inner part of the split
    with pytest.raises(bz.FusionDefinitionError, match="cover the logical domain"):
        t.set_allocation_domain([t.logical[0], t.logical[1], t.loop[2]])  # dimension 1 twice


def test_input_extents_1_are_broadcast_dimensions():
    _, t = _tensor((1, -1, 5))
    assert [d.iter_type for d in t.logical] == [IterType.BROADCAST, IterType.ITERATION, IterType.ITERATION]


def test_reduction_dimensions_stay_in_logical_but_not_in_shape():
    with bz.Fusion() as f:
        x = f.define_tensor((-1, 4))
        s = x.sum(1)
    assert [d.iter_type for d in s.logical] == [IterType.ITERATION, IterType.REDUCTION]
    assert len(s.shape) == 1 and s.ndim == 1


def test_parallelize_and_text():
    _, t = _tensor((-1, 4))
    t.loop[0].parallelize(ParallelType.GRID_X)
    t.loop[1].parallelize(ParallelType.BLOCK_X)
    assert [d.text() for d in t.loop] == ["T0_s0{blockIdx.x}", "4{threadIdx.x}"]
