"""torch.nn.functional's pooling, upsampling, channel norms and nll_loss, and torch's einsum, cdist and
special.entr on traced tensors (`braze/ops/torch_nn.py`, `braze/ops/torch_functions.py`), against eager
torch in float64; a generated test draws pooling windows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze as bz

torch = pytest.importorskip("torch")
F = torch.nn.functional

# (name, function of (img, w, t)): img (2, 4, 6, 8) float64, w (4,) float64, t (2, 6) int64 with one -100.
CASES = [
    ("pools_2d", lambda x, w, t: (F.avg_pool2d(x, 2), F.max_pool2d(x, 2), F.max_pool2d(x, 3, stride=1, padding=1),
                                  F.avg_pool2d(x, (3, 2), stride=(1, 2), padding=(1, 0), count_include_pad=False),
                                  F.max_pool2d(x, 2, dilation=2), F.avg_pool2d(x, 2, divisor_override=3))),
    ("pools_1d_3d", lambda x, w, t: (F.avg_pool1d(x[0], 3, stride=2), F.max_pool1d(x[0], 2),
                                     F.max_pool3d(x, 2), F.avg_pool3d(x, (1, 2, 2)))),
    ("adaptive", lambda x, w, t: (F.adaptive_avg_pool2d(x, 1), F.adaptive_max_pool2d(x, (1, 1)),
                                  F.adaptive_avg_pool2d(x, (3, 4)), F.adaptive_max_pool1d(x[0], 4))),
    ("upsampling", lambda x, w, t: (F.interpolate(x, scale_factor=2), F.interpolate(x, size=(12, 8)),
                                    F.interpolate(x[0], scale_factor=3, mode="nearest"))),
    ("channel_norms", lambda x, w, t: (F.group_norm(x, 2, w, -w), F.group_norm(x, 4), F.instance_norm(x, weight=w),
                                       F.batch_norm(x, None, None, w, w, training=True),
                                       F.batch_norm(x, w, w.abs() + 0.5, None, w, training=False))),
    ("nll_loss", lambda x, w, t: (F.nll_loss(F.log_softmax(x[:, :, :, 0], 1), t), F.nll_loss(x[0, :, 0, 0], t[0, 1]),
                                  F.nll_loss(F.log_softmax(x[..., 0], 1), t, weight=w.abs(), reduction="sum"),
                                  F.nll_loss(x[:, :, 0, 0], t[:, 0], reduction="none", ignore_index=2))),
    ("pad_modes", lambda x, w, t: (F.pad(x, (1, 2, 2, 1), mode="reflect"), F.pad(x[0], (2, 2), mode="replicate"),
                                   F.pad(x, (1, 1, 3, 0), mode="circular"), F.pad(x[0], (2, 1), mode="reflect"))),
    ("einsum_cdist_entr", lambda x, w, t: (torch.einsum("nchw,nchw->nc", x, x), torch.einsum("nchw->hw", [x]),
                                           torch.cdist(x[0, 0], x[0, 1]), torch.cdist(x[:, 0], x[:, 1], p=1),
                                           torch.special.entr(x.sigmoid()), torch.special.entr(x))),
]


@bz.jit
def _every_case(x, w, t):
    return tuple(fn(x, w, t) for _, fn in CASES)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_torch_nn_functions_give_torchs_results(device) -> None:
    if device == "cuda":
        from braze.compile import cuda_driver
        if cuda_driver.device_count() == 0 or not torch.cuda.is_available():
            pytest.skip("no GPU")
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(2, 4, 6, 8, generator=generator, dtype=torch.float64).to(device)
    w = torch.randn(4, generator=generator, dtype=torch.float64).to(device)
    t = torch.tensor([[0, 3, -100, 1, 2, 2], [1, 1, 0, 3, -100, 0]], device=device)
    for (name, fn), outputs in zip(CASES, _every_case(x, w, t), strict=True):
        for n, (got, expected) in enumerate(zip(outputs, fn(x, w, t), strict=True)):
            assert got.dtype == expected.dtype and got.shape == expected.shape, f"{name}[{n}]"
            torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True, msg=f"{name}[{n}]")


@st.composite
def pools(draw) -> tuple:
    """A pooling call of 1 or 2 dimensions: kernel 1-3, stride 1-3, padding up to half the kernel,
    dilation 1-2 (max), count_include_pad either way (avg), on extents the window fits."""
    dims = draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["avg", "max"]))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(dims)) if kind == "max" else (1,) * dims
    extents = tuple(draw(st.integers(d * (k - 1) + 1, 9)) for k, d in zip(kernel, dilation))
    options = {"stride": stride, "padding": padding}
    if kind == "max":
        options["dilation"] = dilation
    else:
        options["count_include_pad"] = draw(st.booleans())
    return dims, kind, kernel, options, (2, 3, *extents)


@settings(max_examples=40, deadline=None)
@given(pools())
def test_random_pooling_windows_give_torchs_result(case) -> None:
    dims, kind, kernel, options, shape = case
    pool = getattr(F, f"{kind}_pool{dims}d")
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(sum(shape)))
    expected = pool(x, kernel, **options)
    got = bz.jit(lambda x: pool(x, kernel, **options) * 2)(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected * 2, rtol=1e-12, atol=1e-12)


def test_a_window_wider_than_the_input_is_an_error() -> None:
    with pytest.raises(bz.Error, match=r"a window of 5 elements does not fit an extent of 4"):
        bz.jit(lambda x: F.max_pool1d(x, 5))(torch.ones(2, 4))
