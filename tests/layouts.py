"""Output layouts built from splits, merges and reorders of an allocation domain, shared by the
CPU host-program tests and the GPU runtime tests."""

from __future__ import annotations

import braze as bz


def split_inner(t):
    t.split(1, 4)
    return t.loop


def merge_split(t):
    t.merge(0).split(0, 8)
    return t.loop


def merge_reorder(t):
    t.merge(0).reorder({0: 1})  # [W, N*C]: the last logical dimension is the slowest
    return t.loop


def padded_channels_last(t):
    t.split(2, 3).reorder({1: 3}).merge(1)  # [N, ceildiv(W, 3) * 3, C]: channels last, W padded to a multiple of 3
    return t.loop


def channels_last(t):
    t.set_stride_order((2, 0, 1))  # [N, C, W] over [N, W, C]
    return None


LAYOUTS = [split_inner, merge_split, merge_reorder, channels_last, padded_channels_last]


def layout_fusion(layout) -> bz.Fusion:
    """exp(x) * y + 1 over 3-d inputs, its output laid out by `layout`."""
    with bz.Fusion() as f:
        x = f.define_tensor((-1, -1, -1), name="x")
        y = f.define_tensor((-1, -1, -1), name="y")
        out = bz.ops.exp(x) * y + 1
        domain = layout(out)
        if domain is not None:
            out.set_allocation_domain(domain)
        f.add_output(out)
    return f
