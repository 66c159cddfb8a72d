"""`@bz.jit` on code that uses sizes as numbers (`np.arange(n)`, `torch.ones(t, t).tril()`, `len(x)`,
`if n > 4`) and reads arrays made outside its arguments: the trace specializes on the sizes so used
(one trace a size, as torch.compile does), and the arrays become inputs of the fusion
(braze/frontend/jit.py, `Trace.guard` and `Trace.captured`)."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz


def _traces(fn) -> int:
    return sum(len(traces) for traces in fn.fusions.values())


def _sample(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def _torch_traces(program, shapes: list[tuple[int, ...]]) -> int:
    """The traces `program` jitted takes over calls at `shapes`, each call checked against eager torch."""
    torch = pytest.importorskip("torch")
    jitted = bz.jit(program)
    for shape in shapes:
        x = torch.from_numpy(_sample(shape))
        got, want = jitted(x), program(x)
        if isinstance(want, torch.Tensor):
            got, want = (got,), (want,)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
    return _traces(jitted)


def test_numpy_arrays_of_a_size_and_len_take_the_calls_size() -> None:
    def program(x):
        rows, cols = x.shape
        ramp = np.arange(cols) * 0.5 + np.linspace(0.0, 1.0, cols)
        lower = np.tri(rows, cols, dtype=x.dtype)
        return x * lower + ramp + np.ones(cols, x.dtype) / len(x) + np.zeros(x.shape, x.dtype)

    jitted = bz.jit(program)
    for shape in [(3, 5), (4, 7), (3, 5)]:
        x = _sample(shape)
        np.testing.assert_allclose(jitted(x), program(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    assert _traces(jitted) == 2


def test_sizes_not_used_as_numbers_keep_one_trace() -> None:
    jitted = bz.jit(lambda x: (x * 2).sum(-1) / x.shape[-1])
    for shape in [(3, 5), (4, 7), (8, 2)]:
        x = _sample(shape)
        np.testing.assert_allclose(jitted(x), x.mean(-1) * 2, rtol=1e-5, atol=1e-6)
    assert _traces(jitted) == 1


def test_a_global_array_is_read_in_place_on_every_call(monkeypatch) -> None:
    table = np.linspace(0.0, 1.0, 5, dtype=np.float32)
    offset = np.exp(table)  # NumPy's, at once: a constant of the trace like any array it reads
    jitted = bz.jit(lambda x: x * table + offset)
    x = _sample((2, 5))
    np.testing.assert_allclose(jitted(x), x * table + offset, rtol=1e-6)
    # a repeated call takes the cached path, the captured arrays passed after the arguments
    monkeypatch.setattr(type(jitted), "_bind", lambda *a: pytest.fail("a cached call bound its arguments again"))
    table[:] = 2.0  # held, not copied: the next call reads the new values
    np.testing.assert_allclose(jitted(x), x * 2.0 + offset, rtol=1e-6)


def test_torch_tensors_of_a_size_and_captured_tensors() -> None:
    torch = pytest.importorskip("torch")
    bias = torch.linspace(-1.0, 1.0, 6)

    def causal_softmax(scores):
        t = scores.shape[-1]
        keep = torch.tril(torch.ones((t, t), dtype=torch.bool))
        positions = torch.arange(t, dtype=torch.float32) + torch.full((t,), 0.5) + torch.eye(t)[0]
        return torch.softmax(scores.masked_fill(~keep, float("-inf")) + positions, -1), scores[..., :6] * bias

    jitted = bz.jit(causal_softmax)
    for t in (6, 9, 6):
        scores = torch.from_numpy(_sample((2, t, t)))
        for got, want in zip(jitted(scores), causal_softmax(scores), strict=True):
            torch.testing.assert_close(got, want)
    assert _traces(jitted) == 2


def test_torch_code_asks_its_tensors_for_their_device_and_kind() -> None:
    torch = pytest.importorskip("torch")

    def program(x):
        ramp = torch.arange(x.shape[-1], device=x.device, dtype=torch.float32)
        return (x + ramp) * x.element_size() if x.is_floating_point() and not x.is_complex() else x

    x = torch.from_numpy(_sample((2, 5)))
    torch.testing.assert_close(bz.jit(program)(x), program(x))
    with pytest.raises(TypeError, match="not DType") as caught:  # torch's own parser, before braze sees it
        bz.jit(lambda x: x.masked_fill(x > 0, torch.finfo(x.dtype).min))(x)
    assert "bz.finfo(x.dtype)" in "".join(caught.value.__notes__)


def test_numpy_math_on_a_size_keeps_one_trace() -> None:
    # attention's scale: a value of the fusion, not the call's number, so no trace per head size
    jitted = bz.jit(lambda x: x / np.sqrt(x.shape[-1]) + np.log(x.shape[0]))
    for shape in [(3, 4), (5, 9)]:
        x = _sample(shape)
        np.testing.assert_allclose(jitted(x), x / np.sqrt(shape[1]) + np.log(shape[0]), rtol=1e-5, atol=1e-6)
    assert _traces(jitted) == 1


def test_torch_checking_the_type_of_a_size_keeps_one_trace() -> None:
    # torch's argument parser asks the first size of a list for __index__ before it dispatches
    torch = pytest.importorskip("torch")

    def program(x):
        rows, cols = x.shape
        flat = torch.reshape(x, (rows * cols,))
        return torch.broadcast_to(flat, (2, rows * cols)) + torch.unflatten(flat, 0, (rows, cols)).sum()

    assert _torch_traces(program, [(3, 4), (5, 2)]) == 1


def test_a_size_used_just_before_a_torch_call_still_specializes() -> None:
    torch = pytest.importorskip("torch")

    def program(x):
        rows = list(range(x.shape[0]))  # a number: nothing braze asks for comes between it and torch.exp
        return torch.exp(x) + torch.tensor(rows)[:, None]

    assert _torch_traces(program, [(3, 4), (5, 4), (3, 4)]) == 2


def test_pieces_of_a_size_used_as_a_number() -> None:
    torch = pytest.importorskip("torch")

    def program(x):
        half = x.shape[1] // 2
        left, right = torch.split(x, [half, x.shape[1] - half], dim=1)
        pairs = torch.split(x, 2, dim=1)  # as many pieces as the size gives
        return left.sum(1) - right.sum(1) + sum(p.sum(1) for p in pairs) + sum(x.unbind(1)), x.narrow(1, 1, half)

    assert _torch_traces(program, [(2, 4), (2, 5), (2, 4)]) == 2


def test_padding_to_a_multiple_of_the_size() -> None:
    torch = pytest.importorskip("torch")

    def program(x):
        return torch.nn.functional.pad(x, (0, (-x.shape[-1]) % 4), value=1.0)

    assert _torch_traces(program, [(2, 3), (2, 4), (2, 6), (2, 3)]) == 3
    with bz.Fusion() as f:
        x = f.define_tensor([-1])
        with pytest.raises(bz.FusionDefinitionError, match="pad: widths: expected ints, got the symbolic extent"):
            bz.ops.pad(x, [(0, x.shape[0])])
        static = f.define_tensor([3])
        f.add_output(bz.ops.pad(static, [(0, static.shape[0])]))  # a static extent is its number
    np.testing.assert_array_equal(f.execute([np.ones(2, np.float32), np.ones(3, np.float32)])[0], [1, 1, 1, 0, 0, 0])


def test_torch_sizes_one_by_one_say_to_give_a_tuple() -> None:
    # torch's parser reads the extent, which has __torch_function__, as the one argument it dispatches on
    torch = pytest.importorskip("torch")
    jitted = bz.jit(lambda x: x + torch.ones(x.shape[0], x.shape[1]))
    with pytest.raises(TypeError) as caught:
        jitted(torch.ones(2, 3))
    assert "give them as one tuple, torch.ones((t, t))" in "\n".join(getattr(caught.value, "__notes__", []))


def test_a_global_0d_array_is_read_in_place_by_numpy_functions() -> None:
    floor = np.array(0.5, dtype=np.float32)
    jitted = bz.jit(lambda x: np.maximum(x, floor) + np.where(x > 0, 0.0, floor))
    x = _sample((2, 3))
    np.testing.assert_allclose(jitted(x), np.maximum(x, 0.5) + np.where(x > 0, 0.0, 0.5), rtol=1e-6)
    floor[()] = 2.0
    np.testing.assert_allclose(jitted(x), np.maximum(x, 2.0) + np.where(x > 0, 0.0, 2.0), rtol=1e-6)


def test_a_call_filed_while_another_thread_drops_traces(monkeypatch) -> None:
    # many sizes drop traces often; a thread filing its call then must not break the one dropping them
    import importlib
    import threading

    monkeypatch.setattr(importlib.import_module("braze.frontend.jit"), "MAX_TRACES", 1)
    jitted = bz.jit(lambda x: x * len(x))
    first, second, third = (np.ones((n, 2), np.float32) for n in (2, 3, 4))
    jitted(first)
    (trace,), = jitted.fusions.values()
    filers = []

    class FilingMidway(dict):
        def items(self):
            for i, item in enumerate(super().items()):
                if i == 0:  # another thread files a call while the dropping thread walks the table
                    filers.append(threading.Thread(target=jitted._remember, args=((third,), trace)))
                    filers[0].start()
                    filers[0].join(0.2)
                yield item

    jitted.described = FilingMidway(jitted.described)
    np.testing.assert_array_equal(jitted(second), second * 3)
    filers[0].join(5)
    assert not filers[0].is_alive()
