"""The cached call on a GPU (docs/architecture.md, "The cached call"): after the first call of an input
description, `execute` runs a prepared call that builds nothing, compiles nothing and gives the
same results as the host program, for every kind of output and input.

Every test needs an NVIDIA GPU (`make gpu-test`); without one they are skipped.
"""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
from segments import alternating, reference

import braze as bz
from braze import config
from braze.compile import cuda_driver
from braze.errors import InputError
from braze.runtime.device_arrays import DeviceArray

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")


def pointwise() -> bz.Fusion:
    with bz.Fusion(name="relu_fma") as f:
        x, y, z = (f.define_tensor([-1]) for _ in range(3))
        f.add_output(bz.ops.relu(x * y + z))
    return f


def randn(*shape, dtype=torch.float32, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=generator, device="cuda").to(dtype)


def test_a_cached_call_builds_and_compiles_nothing_and_launches_once() -> None:
    f = pointwise()
    x, y, z = (randn(1024, seed=n) for n in range(3))
    with bz.record() as first:
        f.execute([x, y, z])
    assert first.entries  # the host program ran and prepared the cached call
    for _ in range(3):
        with bz.record() as rec:
            (out,) = f.execute([x, y, z])
        assert rec.entries == [] and rec.compiles == [] and len(rec.launches) == 1
        torch.testing.assert_close(out, torch.relu(x * y + z))


def test_new_inputs_of_one_description_get_their_own_pointers() -> None:
    f = pointwise()
    f.execute([randn(1000, seed=9)] * 3)
    for seed in range(4):
        x, y, z = (randn(1000, seed=seed * 3 + n) for n in range(3))
        (out,) = f.execute([x, y, z])
        torch.testing.assert_close(out, torch.relu(x * y + z))


def test_a_new_shape_prepares_a_call_but_compiles_nothing() -> None:
    f = pointwise()
    f.execute([randn(1024)] * 3)
    x = randn(777, seed=3)
    with bz.record() as rec:
        (out,) = f.execute([x, x, x])
    assert rec.compiles == [] and rec.entries == ["prepared call relu_fma"]
    torch.testing.assert_close(out, torch.relu(x * x + x))


def test_alternating_descriptions_each_take_their_own_prepared_call() -> None:
    """The last call's guard fails on the other description: the key finds the right one. A tensor
    that requires grad, or one tensor passed twice, has the key of a description learned without
    and fails its guard."""
    f = pointwise()
    small = [randn(300, seed=n) for n in range(3)]
    strided = [randn(600, seed=3 + n)[::2] for n in range(3)]
    grads = [*small[:2], randn(300, seed=6).requires_grad_()]
    descriptions = (small, strided, grads, [small[0]] * 3)
    for inputs in descriptions:  # each prepared or found once
        f.execute(inputs)
    for inputs in (*descriptions, *descriptions):
        with bz.record() as rec:
            (out,) = f.execute(inputs)
        assert rec.compiles == [] and rec.entries == [] and len(rec.launches) == 1
        torch.testing.assert_close(out, torch.relu(inputs[0] * inputs[1] + inputs[2]).detach())
    fast = f.__dict__["_fast_calls"]
    matches = fast.last.matches.function()
    assert matches(small) and not matches(strided) and not matches(grads) and not matches([small[0]] * 3)
    for inputs in (*descriptions, *descriptions):  # outside bz.record(): the last call's guarded run first
        (out,) = f.execute(inputs)
        torch.testing.assert_close(out, torch.relu(inputs[0] * inputs[1] + inputs[2]).detach())
        assert fast.last is fast.prepared[fast.key(inputs)]
    assert fast.run != fast.find  # the last one has a guarded run too (refusing one tensor passed thrice)


def test_wrong_inputs_still_raise_on_a_hit() -> None:
    f = pointwise()
    x = randn(64)
    f.execute([x, x, x])
    with pytest.raises(InputError, match="expected float32"):
        f.execute([x, x, x.double()])
    with pytest.raises(InputError, match="expected 3 inputs"):
        f.execute([x, x])
    with pytest.raises(InputError, match="expected rank 1"):
        f.execute([x, x, randn(8, 8)])


def test_scalar_inputs_are_patched_per_call_and_checked() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor([-1, -1])
        a = f.define_scalar(dtype=bz.float32)
        n = f.define_scalar(dtype=bz.int8)
        f.add_output(x * a + bz.ops.cast(n, bz.float32))
    x = randn(16, 33)
    for alpha, shift in ((2.0, 3), (-0.5, -128), (1e3, 127)):
        (out,) = f.execute([x, alpha, shift])
        torch.testing.assert_close(out, x * alpha + shift)
    with pytest.raises(InputError, match="int8"):
        f.execute([x, 1.0, 300])


def test_in_place_outputs_are_written_into_the_input() -> None:
    with bz.Fusion() as f:
        acc, step = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
        f.add_output(acc + step, alias=acc)
    acc, step = torch.zeros(8, 130, device="cuda"), randn(8, 130)
    for calls in range(1, 4):
        (out,) = f.execute([acc, step])
        assert out.data_ptr() == acc.data_ptr()
        torch.testing.assert_close(acc, step * calls)


def test_hidden_outputs_are_not_returned() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor([-1])
        f.add_output(x * 2.0, hidden=True)
        f.add_output(x + 1.0)
    x = randn(100)
    for _ in range(2):
        outputs = f.execute([x])
        assert len(outputs) == 1
        torch.testing.assert_close(outputs[0], x + 1)


@pytest.mark.parametrize("shape", [(64, 100), (3, 5000), (1, 1 << 16)])
def test_normalizations_and_full_reductions_match_on_every_call(shape) -> None:
    with bz.Fusion() as f:
        x = f.define_tensor([-1, -1])
        f.add_output(bz.ops.softmax(x, -1))
        f.add_output(bz.ops.sum(x, axes=[0, 1]))
    x = randn(*shape, seed=shape[1])
    for _ in range(3):
        soft, total = f.execute([x])
        torch.testing.assert_close(soft, torch.softmax(x, -1))
        torch.testing.assert_close(total, x.sum(), rtol=1e-4, atol=1e-3)


def test_random_ops_match_the_host_stream_on_the_fast_path() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor([-1])
        f.add_output(x + bz.ops.rand(x.shape))
    host = np.zeros(4096, np.float32)
    bz.manual_seed(7)
    expected = [f.execute([host])[0] for _ in range(3)]  # the CPU backend
    device = torch.zeros(4096, device="cuda")
    bz.manual_seed(7)
    got = [f.execute([device])[0].cpu().numpy() for _ in range(3)]  # the first builds, then cached calls
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)
    assert not np.array_equal(got[1], got[2])  # the offset advances per call


def test_poisoned_outputs_take_the_host_program() -> None:
    f = pointwise()
    x = randn(256)
    f.execute([x, x, x])
    with config.scope(enable="poison_outputs"), bz.record() as rec:
        (out,) = f.execute([x, x, x])
    assert rec.entries  # another configuration: the cached call does not apply
    torch.testing.assert_close(out, torch.relu(x * x + x))


def test_device_arrays_and_cupy_take_the_fast_path_too() -> None:
    f = pointwise()
    host = [np.random.default_rng(n).standard_normal(500).astype(np.float32) for n in range(3)]
    arrays = [DeviceArray.from_numpy(h) for h in host]
    expected = np.maximum(host[0] * host[1] + host[2], 0)
    for _ in range(2):
        (out,) = f.execute(arrays)
        assert isinstance(out, DeviceArray)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    cupy = pytest.importorskip("cupy")
    arrays = [cupy.asarray(h) for h in host]
    for _ in range(2):
        with bz.record() as rec:
            (out,) = f.execute(arrays)
        assert isinstance(out, cupy.ndarray)
        np.testing.assert_allclose(cupy.asnumpy(out), expected, rtol=1e-6)
    assert rec.entries == []


def test_threads_calling_one_fusion_get_their_own_results() -> None:
    f = pointwise()
    inputs = [[randn(4096, seed=10 * t + n) for n in range(3)] for t in range(4)]
    f.execute(inputs[0])
    torch.cuda.synchronize()
    errors = []

    def worker(x, y, z) -> None:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(200):
                (out,) = f.execute([x, y, z])
            stream.synchronize()
        if not torch.equal(out, torch.relu(x * y + z)):
            errors.append("wrong result")

    threads = [threading.Thread(target=worker, args=xs) for xs in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_ten_thousand_cached_calls_hold_memory_steady() -> None:
    f = pointwise()
    x = randn(1024)
    for _ in range(2_000):  # warm up: the interpreter's free lists of small objects fill first
        f.execute([x, x, x])
    torch.cuda.synchronize()
    device_before = torch.cuda.memory_allocated()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(10_000):
        f.execute([x, x, x])
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    torch.cuda.synchronize()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 64 * 1024, f"Python memory grew by {grown} bytes over 10,000 calls"
    assert torch.cuda.memory_allocated() - device_before <= 4096 * 2  # at most the last output


def test_twelve_segments_launch_natively_and_from_python_alike() -> None:
    x = randn(64, 300, seed=12)
    results = {}
    for disable in ("", "host_jit"):
        with config.scope(disable=disable):
            f = alternating()
            for _ in range(3):  # the first through the host program, then cached calls
                with bz.record() as rec:
                    results[disable] = f.execute([x])[0]
                assert len(rec.launches) == 12
            native = f.__dict__["_fast_calls"].prepared[f.__dict__["_fast_calls"].key([x])].launch_all
            assert (native is None) == (disable == "host_jit")
            assert native is None or native.patched is not None  # pointers patched by the native builtin
    torch.testing.assert_close(results[""], results["host_jit"], rtol=0, atol=0)
    np.testing.assert_allclose(results[""].cpu().numpy(), reference(x.cpu().numpy()), rtol=1e-4, atol=1e-4)


def test_dynamic_alias_on_the_gpu() -> None:
    with bz.Fusion() as f:
        x, marker = f.define_tensor([-1, -1]), f.define_tensor([-1], dtype=bz.int8)
        f.add_output(x[1:marker.shape[0]])
    x = randn(10, 4)
    for length in (3, 7, 3, 20):
        (view,) = f.execute([x, torch.zeros(length, dtype=torch.int8, device="cuda")])
        torch.testing.assert_close(view, x[1:length])


def test_jit_functions_run_on_the_gpu_and_cache_their_calls() -> None:
    @bz.jit
    def gelu_bias(x, b):
        return bz.ops.gelu(x + b)

    x, b = randn(32, 100), randn(100, seed=1)
    expected = torch.nn.functional.gelu(x + b)
    torch.testing.assert_close(gelu_bias(x, b), expected)
    with bz.record() as rec:
        out = gelu_bias(x, b)
    assert rec.entries == [] and rec.compiles == [] and len(rec.launches) == 1
    assert isinstance(out, torch.Tensor) and out.device.type == "cuda"
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(gelu_bias(x.cpu(), b.cpu()), expected.cpu())  # the same fusion, on the host


def test_profiled_calls_take_the_host_program_without_preparing_again() -> None:
    f = pointwise()
    x = randn(4096)
    with config.scope(enable="poison_outputs"):
        f.execute([x, x, x])  # a configuration of its own: prepares nothing for later calls
    f.execute([x, x, x])
    for _ in range(2):
        with bz.record(profile=True) as rec:
            (out,) = f.execute([x, x, x])
        assert rec.entries == [] and rec.launches[0].device_ms > 0
    torch.testing.assert_close(out, torch.relu(x * x + x))


def _poison_the_allocator(*shapes) -> None:
    """Leaves NaN in blocks of torch's caching allocator that the next allocations of `shapes` reuse."""
    blocks = [torch.full(shape, float("nan"), device="cuda") for shape in shapes]
    del blocks


def test_torch_inputs_take_the_native_call_with_correct_results() -> None:
    f = pointwise()
    x, y, z = (randn(4096, seed=n) for n in range(3))
    f.execute([x, y, z])
    f.execute((x, y, z))
    assert f.__dict__["_fast_calls"].native is not None  # Fusion.execute calls the native builtin first
    outputs = []
    for seed in range(5):
        x, y, z = (randn(4096, seed=10 * seed + n) for n in range(3))
        _poison_the_allocator((4096,))
        (out,) = f.execute([x, y, z] if seed % 2 else (x, y, z))
        torch.testing.assert_close(out, torch.relu(x * y + z))
        assert out.shape == (4096,) and out.stride() == (1,) and out.dtype == torch.float32
        outputs.append(out)
    assert len({o.data_ptr() for o in outputs}) == len(outputs)  # each call its own output


def test_the_native_call_declines_other_descriptions_to_the_python_path() -> None:
    f = pointwise()
    x = randn(300)
    f.execute([x, x, x])
    f.execute([x, x, x])
    for other in ([randn(301)] * 3, [randn(600)[::2]] * 3, [x, x, randn(300, seed=1)]):
        (out,) = f.execute(other)
        torch.testing.assert_close(out, torch.relu(other[0] * other[1] + other[2]))
    with pytest.raises(InputError, match="expected float32"):
        f.execute([x, x, x.double()])


def test_the_native_call_makes_every_output_in_its_layout_and_dtype() -> None:
    with bz.Fusion() as f:
        x, y = f.define_tensor([-1, -1]), f.define_tensor([-1, -1])
        f.add_output(bz.ops.cast(x * y, bz.bfloat16))
        f.add_output(x + y, stride_order=(0, 1))
        f.add_output(bz.ops.sum(x, [1]))
    x, y = randn(33, 70), randn(70, 33, seed=1).t()
    f.execute([x, y])
    f.execute([x, y])
    assert f.__dict__["_fast_calls"].native is not None
    _poison_the_allocator((33, 70), (33,))
    product, total, rows = f.execute([x, y])
    torch.testing.assert_close(product, (x * y).to(torch.bfloat16))
    torch.testing.assert_close(total, x + y)
    assert total.stride() == (1, 33)
    torch.testing.assert_close(rows, x.sum(1), rtol=1e-5, atol=1e-4)


def test_the_native_call_gives_way_to_recording_configuration_and_keywords() -> None:
    f = pointwise()
    x = randn(256)
    f.execute([x, x, x])
    f.execute([x, x, x])
    assert f.__dict__["_fast_calls"].native is not None
    with bz.record() as rec:
        f.execute([x, x, x])
    assert len(rec.launches) == 1 and rec.entries == []
    (out,) = f.execute([x, x, x], backend="cuda")
    torch.testing.assert_close(out, torch.relu(x * x + x))
    with config.scope(disable="fast_call"):
        (out,) = f.execute([x, x, x])
    torch.testing.assert_close(out, torch.relu(x * x + x))
    f.execute([x, x, x])
    f.execute([x, x, x])
    assert f.__dict__["_fast_calls"].native is not None


def test_calls_with_scalars_stay_in_python() -> None:
    with bz.Fusion() as f:
        x = f.define_tensor([-1])
        a = f.define_scalar(dtype=bz.float32)
        f.add_output(x * a)
    x = randn(100)
    f.execute([x, 2.0])
    f.execute([x, 2.0])
    assert f.__dict__["_fast_calls"].native is None  # scalars are patched in Python
    torch.testing.assert_close(f.execute([x, 3.0])[0], x * 3)


def test_the_native_call_runs_on_the_current_stream() -> None:
    f = pointwise()
    x, y, z = (randn(1 << 20, seed=n) for n in range(3))
    f.execute([x, y, z])
    f.execute([x, y, z])
    side = torch.cuda.Stream()
    fresh = randn(1 << 20, seed=7)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # the copy below lands long after the call is enqueued
        x.copy_(fresh)
        (out,) = f.execute([x, y, z])
    side.synchronize()
    torch.testing.assert_close(out, torch.relu(fresh * y + z))
