"""Which trailing axes a pointwise task's rows span (braze/schedule/rows.py), as planned for the call's
signature: H and W of a per-channel or per-(n, c) broadcast over contiguous tensors; the innermost
axis alone where an input is not laid out row-major, where a tensor varies along only some of the
axes, or where no broadcast breaks the pattern just outside them."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze import engine


def planned(build, shapes, arrays=None, gpu: bool = True):
    """The plan of the fusion `build` makes of inputs of `shapes` (symbolic extents; 1 stays 1), for
    `arrays` (default: contiguous ones of those shapes)."""
    with bz.Fusion() as f:
        ins = [f.define_tensor([1 if n == 1 else -1 for n in s], dtype=bz.float32) for s in shapes]
        for out in build(*ins):
            f.add_output(out)
    arrays = arrays or [np.ones(s, np.float32) for s in shapes]
    key = engine.signature(f, engine.bind_inputs(f, arrays))
    plan, _, _ = engine.plan_kernel(f, key, views_on_host=not gpu, gpu=gpu)
    return plan


def rows_of(build, shapes, arrays=None, gpu: bool = True) -> list[int]:
    return [h.row_axes for h in planned(build, shapes, arrays, gpu).heuristics]


def per_channel(x, m):
    return [(x - m) * 2.0]


@pytest.mark.parametrize("gpu", [True, False])
def test_per_channel_rows_span_h_and_w(gpu):
    plan = planned(per_channel, [(2, 3, 5, 7), (1, 3, 1, 1)], gpu=gpu)
    assert [h.row_axes for h in plan.heuristics] == [2]
    assert plan.loops[0].text() == "[merge(i0, i1){blockIdx.x}, merge(i2, i3){vectorize}]"
    assert plan.loops[0].row_axes == (2, 3) and plan.loops[0].parallel_axes == (0, 1)


def test_per_sample_and_channel_statistics_merge_the_spatial_axes_of_5d():
    assert rows_of(per_channel, [(2, 3, 4, 5, 6), (2, 3, 1, 1, 1)]) == [3]


def test_statistics_broadcast_along_w_alone_keep_rows_of_w():
    assert rows_of(per_channel, [(2, 3, 5, 7), (1, 3, 5, 1)]) == [1]


def test_statistics_varying_along_w_alone_keep_rows_of_w():
    assert rows_of(per_channel, [(2, 3, 5, 7), (1, 1, 1, 7)]) == [1]


def test_no_broadcast_no_merge():
    assert rows_of(lambda x, y: [x + y], [(2, 3, 5, 7), (2, 3, 5, 7)]) == [1]


def test_a_per_sample_scale_keeps_two_axes_of_rows():
    # (B, S, D) * m[b]: merging S and D would leave B rows, too few to fill a GPU at batch 1.
    assert rows_of(per_channel, [(2, 5, 7), (2, 1, 1)]) == [1]
    assert rows_of(per_channel, [(2, 3, 5, 7), (2, 1, 1, 1)]) == [1]


@pytest.mark.parametrize("view", ["transposed", "sliced", "offset_rows"])
def test_an_input_not_laid_out_row_major_keeps_rows_of_w(view):
    base = np.ones((2, 3, 7, 5), np.float32) if view == "transposed" else np.ones((2, 3, 5, 9), np.float32)
    x = {"transposed": base.transpose(0, 1, 3, 2), "sliced": base[..., ::2][..., :4],
         "offset_rows": base[..., 1:8]}[view]
    assert rows_of(per_channel, [x.shape, (1, 3, 1, 1)], [x, np.ones((1, 3, 1, 1), np.float32)]) == [1]


def test_a_statistic_read_through_a_broadcast_op():
    assert rows_of(lambda x, m: [x * m[:, None, None]], [(2, 3, 5, 7), (3,)]) == [2]


def group_norm_like(x, m, w):
    grouped = bz.ops.reshape(x, [x.shape[0], 2, -1])
    return [bz.ops.reshape(grouped - m, x.shape) * w[:, None, None]]


def test_per_group_statistics_through_a_reshape():
    assert rows_of(group_norm_like, [(2, 4, 5, 7), (2, 2, 1), (4,)]) == [2]


def test_a_reshaped_input_not_row_major_keeps_rows_of_w():
    x = np.ones((2, 4, 5, 8), np.float32)[..., :7]
    assert rows_of(group_norm_like, [x.shape, (2, 2, 1), (4,)],
                   [x, np.ones((2, 2, 1), np.float32), np.ones(4, np.float32)]) == [1]
