"""The native call on torch tensors (`native/torch_call.py`), checked on host tensors without a GPU:
the driver's cuLaunchKernel and torch's CUDA stream are callbacks recording what the builtin does,
and the outputs come from torch's host allocator. Needs torch (any build)."""

from __future__ import annotations

import ctypes
import gc
import tracemalloc

import pytest
from fake_driver import FakeDriver
from hypothesis import given, settings
from hypothesis import strategies as st

from braze import config
from braze.native import torch_call
from braze.native.launch_jit import NativeLaunches

torch = pytest.importorskip("torch")

STREAM = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p)
CONTEXT = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)
DECLINED = ["declined"]  # what the harness's fallback answers


class Harness:
    """A TorchCall over a fake driver, stream and context: `streams` records each device asked
    about, `block` is the argument block it patches, `fallbacks` and `failures` what was handed
    to its fallback and failure functions."""

    def __init__(self, inputs: list, outputs: list[tuple], returned: list[int], slots: list[tuple[int, int]],
                 launches: int = 2, fail_at: int | None = None, stream_code: int = 0,
                 stream: int | None = None) -> None:
        api = torch_call.torch_api()
        assert api is not None, "this torch's tensors are not laid out as torch_call expects"
        self.streams: list[int] = []
        self.fallbacks: list[tuple] = []
        self.failures: list[int] = []
        self.stream_code, self.context = stream_code, 0xC0
        self.callbacks = (STREAM(self._stream), CONTEXT(self._context))
        self.api = torch_call.TorchApi(torch_call.Api(**{
            **{field: getattr(api.api, field) for field, _ in torch_call.Api._fields_},
            "stream": ctypes.cast(self.callbacks[0], ctypes.c_void_p).value}), torch)
        self.driver = FakeDriver(fail_at, code=700)
        # With `stream`, the launches are that stream's only (a call whose kernels take a workspace).
        specs = [(0x1000 + n, 7, 64, 0, 0x9000 + n) for n in range(launches)]
        self.launches = NativeLaunches(self.driver.driver, specs, stream=stream)
        self.block = (ctypes.c_int64 * 8)(*range(100, 108))
        self.open_recordings = ctypes.c_int64(0)
        tensors = [torch_call.describe_tensor(n, t) for n, t in enumerate(inputs)]
        made = [(sizes, strides, dtype, torch.device("cpu")) for sizes, strides, dtype in outputs]
        conditions = torch_call.Conditions(config.current, ctypes.addressof(self.open_recordings),
                                           ctypes.cast(self.callbacks[1], ctypes.c_void_p).value, 0xC0,
                                           self._fallback, self._failed)
        self.call = torch_call.TorchCall(self.api, len(inputs), tensors, made, returned, self.launches,
                                         ctypes.addressof(self.block), slots, 3, conditions).call

    def _stream(self, device: int, answer: int) -> int:
        self.streams.append(device)
        ctypes.c_void_p.from_address(answer).value = 0x5000 + device
        return self.stream_code

    def _context(self, answer: int) -> int:
        ctypes.c_void_p.from_address(answer).value = self.context
        return 0

    def _fallback(self, *args, **kwargs) -> list:
        self.fallbacks.append((args, kwargs))
        return DECLINED

    def _failed(self, code: int) -> None:
        self.failures.append(code)
        raise RuntimeError(f"launch failed: {code}")

    def declined_untouched(self) -> bool:
        """Whether nothing was patched or launched."""
        return list(self.block) == list(range(100, 108)) and self.driver.calls == []


def two_inputs_one_output(**options) -> tuple[Harness, list]:
    x, y = torch.randn(8, 4), torch.randn(4, 8).t()
    return Harness([x, y], [((8, 4), (4, 1), torch.float32)], [0], [(0, 0), (2, 1), (5, 2)], **options), [x, y]


def test_the_call_makes_the_outputs_patches_the_pointers_and_launches_on_the_device_stream() -> None:
    harness, (x, y) = two_inputs_one_output()
    (out,) = harness.call((x, y))
    assert isinstance(out, torch.Tensor) and out.shape == (8, 4) and out.stride() == (4, 1)
    assert out.dtype == torch.float32 and out.device.type == "cpu"
    assert list(harness.block) == [x.data_ptr(), 101, y.data_ptr(), 103, 104, out.data_ptr(), 106, 107]
    assert harness.streams == [3]
    assert [(c[0], c[1], c[4], c[8], c[9]) for c in harness.driver.calls] == \
        [(0x1000, 7, 64, 0x5003, 0x9000), (0x1001, 7, 64, 0x5003, 0x9001)]
    (again,) = harness.call([x, y])  # a list as well as a tuple
    assert again.data_ptr() != out.data_ptr() and harness.block[5] == again.data_ptr()


def test_outputs_come_back_in_the_order_asked_even_twice() -> None:
    x = torch.randn(3)
    harness = Harness([x], [((2, 3), (1, 2), torch.int64), ((5,), (1,), torch.bfloat16)], [1, 0, 1],
                      [(1, 0), (3, 1), (4, 2)], launches=1)
    first, second, third = harness.call((x,))
    assert first is third and first.dtype == torch.bfloat16 and first.shape == (5,)
    assert second.dtype == torch.int64 and second.shape == (2, 3) and second.stride() == (1, 2)
    assert harness.block[3] == second.data_ptr() and harness.block[4] == first.data_ptr()


@pytest.mark.parametrize("other", [
    lambda x, y: (x, y.double()),                    # dtype
    lambda x, y: (x, torch.randn(4, 7).t()),         # shape
    lambda x, y: (x, y.contiguous()),                # strides
    lambda x, y: (x, torch.nn.Parameter(y)),         # the Python type
    lambda x, y: (x, 1.0),                           # not a tensor
    lambda x, y: (x,),                               # the count
    lambda x, y: (x, y, y),
    lambda x, y: iter([x, y]),                       # neither a tuple nor a list
    lambda x, y: (x, y.numpy()),                     # another library
], ids=["dtype", "shape", "strides", "type", "scalar", "fewer", "more", "iterator", "numpy"])
def test_other_inputs_go_to_the_fallback_before_anything_is_made_or_launched(other) -> None:
    harness, (x, y) = two_inputs_one_output()
    inputs = other(x, y)
    assert harness.call(inputs) is DECLINED and harness.fallbacks == [((inputs,), {})]
    assert harness.declined_untouched()


def test_keywords_more_arguments_and_changed_conditions_go_to_the_fallback() -> None:
    harness, (x, y) = two_inputs_one_output()
    assert harness.call((x, y), backend="cuda") is DECLINED and harness.call((x, y), "cuda") is DECLINED
    assert harness.call() is DECLINED
    assert harness.fallbacks == [(((x, y),), {"backend": "cuda"}), (((x, y), "cuda"), {}), ((), {})]
    with config.scope(disable="fast_call"):
        assert harness.call((x, y)) is DECLINED
    harness.open_recordings.value = 1
    assert harness.call((x, y)) is DECLINED
    harness.open_recordings.value, harness.context = 0, 0xC1
    assert harness.call((x, y)) is DECLINED
    assert len(harness.fallbacks) == 6 and harness.declined_untouched()
    harness.context = 0xC0
    assert isinstance(harness.call((x, y))[0], torch.Tensor)


def test_a_tensor_on_another_device_is_declined() -> None:
    x = torch.randn(4)
    harness = Harness([x], [((4,), (1,), torch.float32)], [0], [(0, 0)])
    spec_address = harness.call.__self__  # the builtin's `self`
    spec = torch_call.CallSpec.from_address(spec_address)
    torch_call.TensorCheck.from_address(spec.checks).device_type = 1  # as if prepared on a GPU
    assert harness.call((x,)) is DECLINED and harness.declined_untouched()


def test_a_failed_launch_hands_its_code_over_and_keeps_no_output() -> None:
    harness, (x, y) = two_inputs_one_output(fail_at=1)
    with pytest.raises(RuntimeError, match="launch failed"):
        harness.call((x, y))
    assert harness.failures == [(1 << 16) | 700] and len(harness.driver.calls) == 2 and not harness.fallbacks

    def failing_call() -> None:
        harness.driver.calls.clear()
        harness.driver.contexts.clear()
        harness.failures.clear()
        with pytest.raises(RuntimeError):
            harness.call((x, y))

    assert _python_memory_growth(failing_call) < 64 * 1024


def test_a_failed_stream_lookup_goes_to_the_fallback() -> None:
    harness, (x, y) = two_inputs_one_output(stream_code=1)
    assert harness.call((x, y)) is DECLINED and harness.declined_untouched()


def test_a_stream_without_a_table_of_its_own_goes_to_the_fallback_until_it_has_one() -> None:
    """A call whose kernels take a grid reduction's workspace launches on each stream the table
    made for it: on another stream it declines before patching or launching anything."""
    harness, (x, y) = two_inputs_one_output(stream=0x5004)  # the harness's stream is 0x5003
    assert harness.call((x, y)) is DECLINED and harness.declined_untouched()
    harness.launches.add_stream(0x5003, [(0x2000 + n, 7, 64, 0, 0xA000 + n) for n in range(2)])
    (out,) = harness.call((x, y))
    assert [(c[0], c[8], c[9]) for c in harness.driver.calls] == [(0x2000, 0x5003, 0xA000), (0x2001, 0x5003, 0xA001)]
    assert harness.block[5] == out.data_ptr() and len(harness.fallbacks) == 1


def test_many_calls_hold_python_memory_steady() -> None:
    harness, (x, y) = two_inputs_one_output(launches=0)
    inputs = (x, y)
    assert _python_memory_growth(lambda: harness.call(inputs)) < 64 * 1024
    assert _python_memory_growth(lambda: harness.call((x, 1.0)) and harness.fallbacks.clear()) < 64 * 1024


def test_a_leak_of_one_object_a_call_would_show() -> None:  # the bound above can fail
    kept = []
    assert _python_memory_growth(lambda: kept.append(torch.empty(0))) > 64 * 1024


def _python_memory_growth(call, times: int = 5000) -> int:
    """Bytes of Python memory still held after `times` more calls than a first batch left."""
    for _ in range(200):
        call()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(times):
            call()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


LAYOUTS = st.lists(st.integers(1, 4), min_size=1, max_size=4).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)), st.permutations(range(len(shape)))))


def _tensor(layout: tuple, dtype) -> object:
    """A tensor of `shape` stored in `order` (a permutation of its dimensions, outermost first)."""
    shape, order = layout
    return torch.zeros([shape[d] for d in order], dtype=dtype).permute(*[order.index(d) for d in range(len(shape))])


@settings(max_examples=60, deadline=None)
@given(LAYOUTS, LAYOUTS, st.sampled_from(["float32", "int32"]))
def test_the_native_guard_says_yes_exactly_for_the_same_description(prepared, other, dtype) -> None:
    a = _tensor(prepared, torch.float32)
    b = _tensor(other, getattr(torch, dtype))
    harness = Harness([a], [((2,), (1,), torch.float32)], [0], [(0, 0), (1, 1)], launches=1)
    result = harness.call((b,))
    same = (b.shape, b.stride(), b.dtype) == (a.shape, a.stride(), a.dtype)
    assert (result is not DECLINED) == same
    if same:
        assert harness.block[0] == b.data_ptr() and harness.block[1] == result[0].data_ptr()
    else:
        assert harness.fallbacks == [(((b,),), {})] and harness.declined_untouched()
