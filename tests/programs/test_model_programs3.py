"""Programs of a third kind, as model authors and scientists write them with NumPy's and torch's functions
under `@bz.jit`: decoding math (a temperature softmax under a top-k mask from a k-th value passed in, a
repetition penalty, log-probabilities gathered by a one-hot product), metrics (box IoU, an SSIM of 3x3
window means by slices, precision and recall from bool sums), probability (Gumbel-softmax from uniform
numbers passed in, Jensen-Shannon divergence with zero probabilities, a mixture log-likelihood over
logsumexp), signal and image processing (a moving average by cumsum differences, a separable blur by
padded slices with total variation), geometry (quaternion products by slices, Rodrigues rotations,
barycentric coordinates), statistics (NaN-skipping moments, covariance as a mean of outer products),
integers (histograms by comparison, a uint32 xorshift), torch's (values, indices) scans and results in a
dict. Each is checked against NumPy in float64 (or eager torch) on the CPU and on a GPU (the `where`
fixture of tests/programs/conftest.py); new outputs start as NaN or -1."""

from __future__ import annotations

import numpy as np
from programs.test_model_programs import assert_close, softmax

import braze as bz

ops = bz.ops
RNG = np.random.default_rng(9)


def normal(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def f64(*arrays: np.ndarray):
    return [a.astype(np.float64) for a in arrays]


def logsumexp(x: np.ndarray, axis: int = -1, keepdims: bool = False) -> np.ndarray:
    top = x.max(axis, keepdims=True)
    out = np.log(np.exp(x - top).sum(axis, keepdims=True)) + top
    return out if keepdims else np.squeeze(out, axis)


# --- decoding --------------------------------------------------------------------------------------
def test_temperature_top_k_softmax_repetition_penalty_and_gathered_log_probs(where):
    @bz.jit
    def decode(logits, kth, seen, targets, temperature, penalty):
        penalized = np.where(seen, np.where(logits > 0, logits / penalty, logits * penalty), logits)
        scaled = np.where(penalized >= kth[:, None], penalized, -np.inf) / temperature
        probs = np.exp(scaled - scaled.max(-1, keepdims=True))
        probs = probs / probs.sum(-1, keepdims=True)
        log_probs = penalized - ops.logsumexp(penalized, -1, keepdim=True)
        one_hot = ops.arange(logits.shape[-1]) == targets[:, None]
        return probs, (log_probs * one_hot).sum(-1)

    logits, seen = normal(5, 33) * 2, RNG.random((5, 33)) < 0.3
    targets = RNG.integers(0, 33, 5)
    def penalize(x, penalty):
        return np.where(seen, np.where(x > 0, x / penalty, x * penalty), x)

    # The mask compares float32 values, as the program does: a float64 reference would round otherwise.
    penalized32 = penalize(logits, np.float32(1.3))
    kth = np.sort(penalized32, -1)[:, -4]  # the 4th largest, as a sampler passes it in
    penalized = penalize(f64(logits)[0], 1.3)
    scaled = np.where(penalized32 >= kth[:, None], penalized, -np.inf) / 0.7
    log_probs = penalized - logsumexp(penalized, -1, keepdims=True)
    got = where.host(decode(where(logits), where(kth), where(seen), where(targets), 0.7, 1.3))
    assert_close(got, [softmax(scaled), log_probs[np.arange(5), targets]])
    assert ((got[0] > 0).sum(-1) == 4).all()


# --- metrics ---------------------------------------------------------------------------------------
def boxes(n: int) -> np.ndarray:
    corner, size = RNG.random((n, 2)) * 10, RNG.random((n, 2)) * 5 + 0.1
    return np.concatenate([corner, corner + size], 1).astype(np.float32)


def test_pairwise_box_iou(where):
    @bz.jit
    def box_iou(a, b):
        area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
        area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        wh = np.clip(np.minimum(a[:, None, 2:], b[None, :, 2:]) - np.maximum(a[:, None, :2], b[None, :, :2]), 0, None)
        inter = wh[..., 0] * wh[..., 1]
        return inter / (area_a[:, None] + area_b[None, :] - inter)

    for n, m in ((7, 5), (1, 12)):
        a, b = boxes(n), boxes(m)
        a64, b64 = f64(a, b)
        wh = np.clip(np.minimum(a64[:, None, 2:], b64[None, :, 2:]) - np.maximum(a64[:, None, :2], b64[None, :, :2]),
                     0, None)
        inter = wh[..., 0] * wh[..., 1]
        area = lambda z: (z[:, 2] - z[:, 0]) * (z[:, 3] - z[:, 1])  # noqa: E731
        assert_close(where.host(box_iou(where(a), where(b))), inter / (area(a64)[:, None] + area(b64) - inter))


def window_mean(t):
    """3x3 window means (valid) by slices, the same code on NumPy arrays and traced tensors."""
    rows = t[..., :-2, :] + t[..., 1:-1, :] + t[..., 2:, :]
    return (rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:]) / 9


def test_ssim_from_window_means_and_precision_recall(where):
    def ssim(x, y, c1, c2):
        mx, my = window_mean(x), window_mean(y)
        sxx, syy, sxy = window_mean(x * x) - mx * mx, window_mean(y * y) - my * my, window_mean(x * y) - mx * my
        s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))
        return s.mean(axis=(1, 2, 3))

    @bz.jit
    def metrics(x, y, pred, target, c1, c2):
        tp, fp, fn = (pred & target).sum(), (pred & ~target).sum(), (~pred & target).sum()
        return ssim(x, y, c1, c2), tp / (tp + fp), tp / (tp + fn)

    x = RNG.random((2, 3, 16, 17)).astype(np.float32)
    y = np.clip(x + normal(2, 3, 16, 17) * 0.05, 0, 1)
    pred, target = RNG.random(100) > 0.5, RNG.random(100) > 0.4
    tp, fp, fn = (pred & target).sum(), (pred & ~target).sum(), (~pred & target).sum()
    got = where.host(metrics(where(x), where(y), where(pred), where(target), 1e-4, 9e-4))
    assert_close(got, [ssim(*f64(x, y), 1e-4, 9e-4), tp / (tp + fp), tp / (tp + fn)], tol=2e-3)


# --- probability -----------------------------------------------------------------------------------
def test_gumbel_softmax_js_divergence_and_mixture_likelihood(where):
    @bz.jit
    def probability(logits, uniform, tau, p, q, x, weights, mu, log_sigma):
        y = (logits - np.log(-np.log(uniform))) / tau
        soft = np.exp(y - ops.logsumexp(y, -1, keepdim=True))
        hard = (ops.arange(logits.shape[-1]) == soft.argmax(-1, keepdims=True)).astype(soft.dtype)
        m = 0.5 * (p + q)
        js = 0.5 * (np.where(p > 0, p * np.log(p / m), 0.0).sum(-1) + np.where(q > 0, q * np.log(q / m), 0.0).sum(-1))
        z = (x[:, None] - mu) / np.exp(log_sigma)
        component = -0.5 * z * z - log_sigma - 0.5 * np.log(2 * np.pi)
        log_w = weights - ops.logsumexp(weights, -1, keepdim=True)
        return hard - soft + soft, js, ops.logsumexp(log_w + component, -1).mean()

    logits, uniform = normal(4, 7), RNG.random((4, 7)).astype(np.float32) * 0.98 + 0.01
    p, q = softmax(normal(3, 10).astype(np.float64) * 2), softmax(normal(3, 10).astype(np.float64))
    p[0, 3], q[1, 5] = 0, 0  # a zero probability on either side
    p, q = p.astype(np.float32), q.astype(np.float32)
    x, weights, mu, log_sigma = normal(50), normal(3), normal(3), normal(3) * 0.3
    y = (f64(logits)[0] - np.log(-np.log(f64(uniform)[0]))) / 0.5
    p64, q64 = f64(p, q)
    m = 0.5 * (p64 + q64)
    with np.errstate(divide="ignore", invalid="ignore"):
        js = 0.5 * np.where(p64 > 0, p64 * np.log(p64 / m), 0).sum(-1) + 0.5 * np.where(q64 > 0, q64 * np.log(q64 / m),
                                                                                          0).sum(-1)
    x64, w64, mu64, ls64 = f64(x, weights, mu, log_sigma)
    z = (x64[:, None] - mu64) / np.exp(ls64)
    mixture = logsumexp(w64 - logsumexp(w64) - 0.5 * z * z - ls64 - 0.5 * np.log(2 * np.pi), -1).mean()
    got = where.host(probability(*map(where, (logits, uniform)), 0.5, *map(where, (p, q, x, weights, mu, log_sigma))))
    assert_close(got, [np.eye(7)[softmax(y).argmax(-1)], js, mixture])


# --- signal and image processing -------------------------------------------------------------------
def test_moving_average_by_cumsum_differences(where):
    @bz.jit(static_argnames="width")
    def moving_average(x, width):
        c = np.pad(np.cumsum(x, axis=-1), ((0, 0), (1, 0)))
        return (c[:, width:] - c[:, :-width]) / width

    for n in (20, 5):
        x = normal(6, n)
        c = np.pad(np.cumsum(f64(x)[0], -1), ((0, 0), (1, 0)))
        assert_close(where.host(moving_average(where(x), width=5)), (c[:, 5:] - c[:, :-5]) / 5)


def test_separable_blur_by_padded_slices_and_total_variation(where):
    def blur(img, k0, k1, k2):
        p = np.pad(img, ((0, 0), (1, 1), (1, 1)))
        h = k0 * p[:, :, :-2] + k1 * p[:, :, 1:-1] + k2 * p[:, :, 2:]
        return k0 * h[:, :-2] + k1 * h[:, 1:-1] + k2 * h[:, 2:]

    @bz.jit
    def blur_and_tv(img, k0, k1, k2):
        smooth = blur(img, k0, k1, k2)
        tv = np.abs(np.diff(smooth, axis=1)).sum(axis=(1, 2)) + np.abs(smooth[:, :, 1:] - smooth[:, :, :-1]).sum(
            axis=(1, 2))
        return smooth, tv

    img = RNG.random((3, 13, 17)).astype(np.float32)
    smooth = blur(f64(img)[0], 0.25, 0.5, 0.25)
    tv = np.abs(np.diff(smooth, axis=1)).sum((1, 2)) + np.abs(np.diff(smooth, axis=2)).sum((1, 2))
    assert_close(where.host(blur_and_tv(where(img), 0.25, 0.5, 0.25)), [smooth, tv], tol=1e-3)


# --- geometry --------------------------------------------------------------------------------------
def quaternion_product(q, r):
    w1, x1, y1, z1 = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    w2, x2, y2, z2 = r[..., 0], r[..., 1], r[..., 2], r[..., 3]
    return np.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2], axis=-1)


def test_quaternion_products_and_rodrigues_rotations(where):
    @bz.jit
    def rotations(q, r, axis_angle):
        q = q / np.linalg.norm(q, axis=-1, keepdims=True)
        theta = np.sqrt((axis_angle * axis_angle).sum(-1, keepdims=True))
        k = axis_angle / theta
        kx, ky, kz = k[:, 0], k[:, 1], k[:, 2]
        zero = np.zeros_like(kx)
        cross = np.stack([np.stack([zero, -kz, ky], -1), np.stack([kz, zero, -kx], -1),
                          np.stack([-ky, kx, zero], -1)], -2)
        cross2 = (cross[:, :, :, None] * cross[:, None, :, :]).sum(2)
        return quaternion_product(q, r), np.sin(theta)[..., None] * cross + (1 - np.cos(theta))[..., None] * cross2

    q, r, aa = normal(10, 4), normal(10, 4), normal(8, 3)
    q64, r64, aa64 = f64(q, r, aa)
    theta = np.linalg.norm(aa64, axis=-1, keepdims=True)
    k = aa64 / theta
    cross = np.cross(k[:, None, :], -np.eye(3)[None])  # the matrix of k x (.)
    rodrigues = np.sin(theta)[..., None] * cross + (1 - np.cos(theta))[..., None] * (cross @ cross)
    got = where.host(rotations(where(q), where(r), where(aa)))
    assert_close(got, [quaternion_product(q64 / np.linalg.norm(q64, axis=-1, keepdims=True), r64), rodrigues])


def test_barycentric_coordinates_and_point_to_plane_distances(where):
    def barycentric(p, a, b, c):
        v0, v1, v2 = b - a, c - a, p - a
        d00, d01, d11 = (v0 * v0).sum(), (v0 * v1).sum(), (v1 * v1).sum()
        d20, d21 = (v2 * v0).sum(-1), (v2 * v1).sum(-1)
        den = d00 * d11 - d01 * d01
        v, w = (d11 * d20 - d01 * d21) / den, (d00 * d21 - d01 * d20) / den
        return 1 - v - w, v, w, (v >= 0) & (w >= 0) & (v + w <= 1)

    @bz.jit
    def geometry(p, a, b, c, points, normal_, offset):
        n = normal_ / np.sqrt((normal_ * normal_).sum())
        return (*barycentric(p, a, b, c), (points * n).sum(-1) + offset)

    a, b, c = np.array([0.1, -0.2], np.float32), np.array([1.3, 0.1], np.float32), np.array([-0.2, 1.1], np.float32)
    p = np.concatenate([normal(20, 2) * 0.8, [[0.3, 0.3], [2.0, 2.0]]]).astype(np.float32)  # one in, one out
    points, n = normal(30, 3), normal(3)
    n64 = f64(n)[0] / np.linalg.norm(n)
    expected = [*barycentric(*f64(p, a, b, c)), f64(points)[0] @ n64 + 0.3]
    got = where.host(geometry(*map(where, (p, a, b, c, points, n)), 0.3))
    assert_close(got[:3] + got[4:], expected[:3] + expected[4:], tol=1e-3)
    np.testing.assert_array_equal(got[3], expected[3])  # no point of these lies within float32 rounding of an edge
    assert 0 < got[3].sum() < len(p)


# --- statistics ------------------------------------------------------------------------------------
def test_nan_skipping_moments_z_scores_and_covariance(where):
    @bz.jit
    def statistics(x, with_nans):
        valid = ~np.isnan(with_nans)
        count = valid.sum(-1)
        nan_mean = np.where(valid, with_nans, 0).sum(-1) / count
        nan_std = np.sqrt(np.where(valid, (with_nans - nan_mean[:, None]) ** 2, 0).sum(-1) / count)
        z = (x - x.mean(0, keepdims=True)) / np.std(x, axis=0, ddof=1, keepdims=True)
        centered = x - x.mean(0)
        covariance = (centered[:, :, None] * centered[:, None, :]).sum(0) / (x.shape[0] - 1)
        return nan_mean, nan_std, z, covariance

    x = normal(7, 9)
    with_nans = np.where(RNG.random((7, 9)) < 0.2, np.nan, x).astype(np.float32)
    x64, n64 = f64(x, with_nans)
    expected = [np.nanmean(n64, -1), np.nanstd(n64, -1), (x64 - x64.mean(0)) / x64.std(0, ddof=1),
                np.cov(x64, rowvar=False)]
    assert_close(where.host(statistics(where(x), where(with_nans))), expected)


# --- integers --------------------------------------------------------------------------------------
def test_histogram_by_comparison_and_a_uint32_xorshift(where):
    @bz.jit
    def integers(values, edges, ids, state):
        inside = (values[:, None] >= edges[None, :-1]) & (values[:, None] < edges[None, 1:])
        counts = (ids[:, None] == ops.arange(6)[None, :]).sum(0)
        state = state ^ (state << 13)
        state = state ^ (state >> 17)
        state = state ^ (state << 5)
        return inside.sum(0), counts, state, (state >> 8).astype(np.float32) * (1.0 / (1 << 24))

    values, edges = RNG.random(200).astype(np.float32), np.linspace(0, 1, 11).astype(np.float32)
    ids, state = RNG.integers(0, 6, 50), RNG.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    expected_state = state ^ (state << np.uint32(13))
    expected_state ^= expected_state >> np.uint32(17)
    expected_state ^= expected_state << np.uint32(5)
    got = where.host(integers(*map(where, (values, edges, ids, state))))
    assert got[2].dtype == np.uint32
    np.testing.assert_array_equal(got[0], np.histogram(values, edges)[0])
    np.testing.assert_array_equal(got[1], np.bincount(ids, minlength=6))
    np.testing.assert_array_equal(got[2], expected_state)
    assert_close(got[3], (expected_state >> 8) / 2**24)


# --- torch -----------------------------------------------------------------------------------------
def test_torch_running_extremes_and_metrics_in_a_dict(torch, where):
    @bz.jit
    def drawdown(prices):
        peak, peak_at = torch.cummax(prices, dim=1)
        drop = 1 - prices / peak
        worst, worst_at = drop.max(dim=1)
        return {"drawdown": drop, "worst": (worst, worst_at), "peak_at": peak_at,
                "norm": torch.linalg.vector_norm(drop, dim=1)}

    prices = torch.rand(4, 30, dtype=torch.float32).add(0.5).cumprod(1).to(where.torch_device)
    got = drawdown(prices)
    peak, peak_at = torch.cummax(prices.double(), dim=1)
    drop = 1 - prices.double() / peak
    assert list(got) == ["drawdown", "worst", "peak_at", "norm"]
    torch.testing.assert_close(got["drawdown"].double(), drop, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["peak_at"], peak_at)
    torch.testing.assert_close(got["worst"][0].double(), drop.max(1).values, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["worst"][1], drop.max(1).indices)
    torch.testing.assert_close(got["norm"].double(), torch.linalg.vector_norm(drop, dim=1), rtol=1e-5, atol=1e-6)
