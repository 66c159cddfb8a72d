"""`@bz.kernel` on a GPU: every shared kernel case on torch, CuPy and DeviceArray arguments against the
CPU (bit for bit where the math is exact), fused against unfused, debug checks, atomics under
contention, launch counts, the cached call, streams and argument errors.

Every test needs an NVIDIA GPU (`make gpu-test`); run just these with

    .venv/bin/python -m pytest -q -m cuda tests/cuda/test_loop_kernels.py
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import sibling_tests
from kernel_cases import all_cases, poison

import braze as bz
from braze import config
from braze.compile import cuda_driver
from braze.runtime.device_arrays import DeviceArray

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(cuda_driver.device_count() == 0, reason="needs an NVIDIA GPU")]
CASES = all_cases()
BFLOAT16 = bz.bfloat16.numpy


# --- moving arrays to and from each library -------------------------------------------------------
def _torch():
    return pytest.importorskip("torch")


def to_library(library: str, array: np.ndarray):
    if library == "torch":
        torch = _torch()
        if array.dtype == BFLOAT16:
            return torch.from_numpy(array.view(np.int16).copy()).cuda().view(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(array)).cuda()
    if library == "cupy":
        cupy = pytest.importorskip("cupy")
        if array.dtype == BFLOAT16:
            pytest.skip("CuPy has no bfloat16")
        return cupy.asarray(array)
    return DeviceArray.from_numpy(array)


def to_host(value) -> np.ndarray:
    if isinstance(value, DeviceArray):
        return value.numpy()
    if type(value).__module__.startswith("cupy"):
        return value.get()
    torch = _torch()
    if value.dtype == torch.bfloat16:
        return value.view(torch.int16).cpu().numpy().view(BFLOAT16)
    return value.cpu().numpy()


def run_on_gpu(kernel, host_args: list, library: str) -> list:
    """Runs `kernel` on copies of `host_args` in `library`'s arrays; returns the arrays back on the host."""
    gpu_args = [to_library(library, a) if isinstance(a, np.ndarray) else a for a in host_args]
    kernel(*gpu_args)
    return [to_host(g) if isinstance(a, np.ndarray) else a for g, a in zip(gpu_args, host_args)]


def assert_same(got: np.ndarray, want: np.ndarray, tolerance: float, what: str) -> None:
    if tolerance == 0:
        np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8), err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tolerance,
                                   atol=tolerance, equal_nan=True, err_msg=what)


def poisoned_args(case, seed: int = 0) -> list:
    args = case.args(np.random.default_rng(seed))
    for position in case.outputs:
        poison(args[position])
    return args


# --- every case against the CPU -------------------------------------------------------------------
@pytest.mark.parametrize("library", ["torch", "cupy", "device_array"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_matches_the_cpu(case, library):
    host = poisoned_args(case)
    expected = [a.copy() if isinstance(a, np.ndarray) else a for a in host]
    case.kernel(*expected)
    got = run_on_gpu(case.kernel, host, library)
    if case.compare is not None:
        case.compare(got, expected)
        return
    for n, (g, e) in enumerate(zip(got, expected)):
        if isinstance(e, np.ndarray):
            assert_same(g, e, case.tolerance, f"{case.name}: argument {n}")


@pytest.mark.parametrize("case", [c for c in CASES if c.compare is None], ids=lambda c: c.name)
def test_fused_and_unfused_agree_bit_for_bit(case):
    unfused = bz.kernel(fuse_tasks=False, debug=case.kernel.debug)(case.kernel.fn)
    fused_out = run_on_gpu(case.kernel, poisoned_args(case, 3), "device_array")
    with config.scope(fuse_tasks=False):
        knob_out = run_on_gpu(case.kernel, poisoned_args(case, 3), "device_array")
    unfused_out = run_on_gpu(unfused, poisoned_args(case, 3), "device_array")
    for a, b, c in zip(fused_out, knob_out, unfused_out):
        if isinstance(a, np.ndarray):
            assert_same(a, b, 0, case.name)
            assert_same(a, c, 0, case.name)


def test_strided_torch_views():
    torch = _torch()
    base = torch.arange(24, dtype=torch.float64, device="cuda").reshape(4, 6)
    case = next(c for c in CASES if c.name == "strided")
    case.kernel(base[::2, 1::2], 1, 3)
    expected = np.arange(24, dtype=np.float64).reshape(4, 6)
    case.kernel(expected[::2, 1::2], 1, 3)
    np.testing.assert_array_equal(base.cpu().numpy(), expected)


# --- semantics ------------------------------------------------------------------------------------
@bz.kernel(debug=True)
def shift(a: bz.Array[bz.float32, 1], b: bz.Array[bz.float32, 1]):
    for i in range(b.shape[0]):
        b[i] = a[i + 1]


def test_debug_out_of_bounds_raises():
    a = DeviceArray.from_numpy(np.ones(4096, np.float32))
    with pytest.raises(bz.KernelAssertionError, match=r"index out of bounds: axis 0 of 'a'"):
        shift(a, DeviceArray.from_numpy(np.zeros(4096, np.float32)))
    b = DeviceArray.from_numpy(np.zeros(4095, np.float32))
    shift(a, b)  # in bounds: no error (the status word was reset)
    assert b.numpy().tolist() == [1.0] * 4095


@bz.kernel
def contend(bins: bz.Array[bz.int32, 1], big: bz.Array[bz.int64, 1], sums: bz.Array[bz.float32, 1],
            extremes: bz.Array[bz.float64, 1], n: int):
    for i in range(n):
        bz.atomic_add(bins[i % bins.shape[0]], 1)
        bz.atomic_sub(big[i % 3], i)
        bz.atomic_add(sums[i % 2], 1.0)
        bz.atomic_max(extremes[0], bz.float64(i))
        bz.atomic_min(extremes[1], bz.float64(-i))


def test_atomics_under_contention_are_exact_for_integers():
    n = 1 << 20
    bins, big = DeviceArray.from_numpy(np.zeros(5, np.int32)), DeviceArray.from_numpy(np.zeros(3, np.int64))
    sums, extremes = DeviceArray.from_numpy(np.zeros(2, np.float32)), DeviceArray.from_numpy(np.zeros(2))
    contend(bins, big, sums, extremes, n)
    i = np.arange(n)
    assert bins.numpy().tolist() == np.bincount(i % 5).tolist()
    assert big.numpy().tolist() == [-int(i[i % 3 == r].sum()) for r in range(3)]
    assert sums.numpy().tolist() == [n / 2, n / 2]  # 1.0 added 2**19 times stays exact in float32
    assert extremes.numpy().tolist() == [n - 1.0, -(n - 1.0)]


def test_the_particle_step_is_one_launch_and_matches_the_cpu():
    torch = _torch()
    from braze.cli.particles import particle_step, particle_step_unfused, particles

    host = particles(8192)
    gpu = [torch.from_numpy(a).cuda() for a in host]
    dt = np.float32(1e-3)
    with bz.record() as fused:
        particle_step(*gpu, dt)
    with bz.record() as unfused:
        particle_step_unfused(*[g.clone() for g in gpu], dt)
    assert (len(fused.launches), len(unfused.launches)) == (1, 6)
    for _ in range(9):
        particle_step(*gpu, dt)
    for _ in range(10):
        particle_step(*host, dt)
    for g, h in zip(gpu, host):
        np.testing.assert_array_equal(g.cpu().numpy(), h)


def test_a_cached_call_compiles_and_prepares_nothing():
    torch = _torch()
    from braze.cli.particles import particle_step, particles

    gpu = [torch.from_numpy(a).cuda() for a in particles(4096)]
    particle_step(*gpu, np.float32(1e-3))
    prepared = dict(particle_step.calls.prepared)
    with bz.record() as rec:
        particle_step(*gpu, np.float32(2e-3))
        particle_step(*[g.clone() for g in gpu], np.float32(2e-3))  # new pointers, same description
    assert rec.compiles == [] and rec.entries == [] and len(rec.launches) == 2
    assert particle_step.calls.prepared.keys() == prepared.keys()


def test_torch_calls_take_the_guarded_call_fusions_take():
    """A loop kernel's calls are filed in the fusions' call cache: on torch tensors the call taken
    last runs behind torch's tensor guards; a strided view misses them, goes through the key and
    gets a prepared call of its own. Outputs are poisoned first."""
    torch = _torch()
    from braze.runtime.fast_call import guard

    @bz.kernel
    def scale(x: bz.Array[bz.float32, 1], y: bz.Array[bz.float32, 1], a: float):
        for i in range(x.shape[0]):
            y[i] = a * x[i]

    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    y = torch.full_like(x, float("nan"))
    if guard([x, y, 2.0], frozenset({2})) is None:
        pytest.skip("this torch has no C++ tensor guards")
    scale(x, y, 2.0)  # compiles and files its prepared call
    scale(x, y, 2.5)  # found by its key: from now on tried first, behind the guard
    assert "run" in scale.calls.__dict__
    with bz.record() as rec:
        scale(x, y, 3.0)
    assert rec.entries == [] and len(rec.launches) == 1
    np.testing.assert_array_equal(y.cpu().numpy(), 3.0 * np.arange(1000, dtype=np.float64))
    out = torch.full((500,), float("nan"), device="cuda")
    scale(x[::2], out, 0.5)
    assert len(scale.calls.prepared) == 2
    np.testing.assert_array_equal(out.cpu().numpy(), 0.5 * np.arange(0, 1000, 2, dtype=np.float64))


def test_runs_on_the_current_torch_stream():
    torch = _torch()
    from braze.cli.particles import particle_step, particles

    host = particles(100_000)
    gpu = [torch.from_numpy(a).cuda() for a in host]
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        particle_step(*gpu, np.float32(1e-3))
        x_after = gpu[0].clone()  # ordered after the kernel on the same stream
    stream.synchronize()
    particle_step(*host, np.float32(1e-3))
    np.testing.assert_array_equal(x_after.cpu().numpy(), host[0])


def test_mixing_host_and_gpu_arrays_is_an_input_error():
    torch = _torch()
    from braze.cli.particles import particle_step, particles

    x, v, f, m = particles(16)
    with pytest.raises(bz.InputError, match=r"argument 'mass': expected a GPU array .*got a host array"):
        particle_step(torch.from_numpy(x).cuda(), torch.from_numpy(v).cuda(), torch.from_numpy(f).cuda(), m,
                      np.float32(1e-3))
    with pytest.raises(bz.InputError, match=r"argument 'v': expected a GPU array .*got a host array"):
        particle_step(torch.from_numpy(x).cuda(), torch.from_numpy(v), torch.from_numpy(f).cuda(),
                      torch.from_numpy(m).cuda(), np.float32(1e-3))


@pytest.mark.skipif(cuda_driver.device_count() < 2, reason="needs two GPUs")
def test_arrays_on_two_gpus_are_an_input_error():
    torch = _torch()
    from braze.cli.particles import particle_step, particles

    x, v, f, m = (torch.from_numpy(a) for a in particles(16))
    with pytest.raises(bz.InputError, match=r"argument 'f': expected an array on cuda:0 .*got one on cuda:1"):
        particle_step(x.cuda(0), v.cuda(0), f.cuda(1), m.cuda(0), np.float32(1e-3))


def test_second_gpu_runs_its_own_module():
    if cuda_driver.device_count() < 2:
        pytest.skip("needs two GPUs")
    torch = _torch()
    from braze.cli.particles import particle_step, particles

    host = particles(1000)
    for device in (0, 1):
        gpu = [torch.from_numpy(a).to(f"cuda:{device}") for a in host]
        particle_step(*gpu, np.float32(1e-3))
        torch.cuda.synchronize(device)


def test_augmented_assignment_to_shared_elements_is_atomic_on_the_gpu():
    from frontend.test_kernel_atomics import histogram, total

    torch = _torch()
    x = torch.ones(1 << 22, device="cuda")
    tot = torch.zeros(1, device="cuda")
    total(x, tot)
    assert tot.item() == x.numel()
    ids = np.random.default_rng(3).integers(0, 37, 1_000_003).astype(np.int32)
    counts = torch.zeros(37, dtype=torch.int64, device="cuda")
    histogram(torch.from_numpy(ids).cuda(), counts)
    np.testing.assert_array_equal(counts.cpu().numpy(), np.bincount(ids, minlength=37))


def test_a_self_overlapping_view_is_not_fused_on_the_gpu():
    from runtime.test_self_overlap import double_then_shift, run_in_python

    torch = _torch()
    buf = torch.arange(9, dtype=torch.float32, device="cuda")
    want = np.arange(9, dtype=np.float32)
    run_in_python(np.lib.stride_tricks.sliding_window_view(want, 2, writeable=True), 8)
    double_then_shift(buf.unfold(0, 2, 1), 8)
    np.testing.assert_array_equal(buf.cpu().numpy(), want)


# --- generated vector and random-number programs ---------------------------------------------------
def _owned_reads(lines: list[str]) -> list[str]:
    """A loop's statements with every read of an array the loop writes made at the loop's index."""
    written = {m.group(1) for line in lines if (m := re.match(r"\s*(x\d|s)\[i\]", line))}
    owned = lambda m: f"{m.group(1)}[i]" if m.group(1) in written else m.group(0)  # noqa: E731
    return [re.sub(r"\b(x\d|s)\[([^\]]+)\]", owned, line) for line in lines]


def test_generated_vector_programs_match_the_cpu():
    from hypothesis import HealthCheck, given, settings

    fuzz = sibling_tests.load("frontend/test_fuzz_vector_programs.py")

    # BRAZE_FUZZ_LOOP_EXAMPLES=n runs n programs instead of 25, as the CPU loop fuzzers do.
    examples = int(os.environ.get("BRAZE_FUZZ_LOOP_EXAMPLES", "25"))

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(fuzz.programs())
    def check(program):
        arrays, tasks = program
        # The generator also reads other threads' elements of an array the same loop writes
        # (`x0[i] = x0[n - 1 - i]`): a race on a GPU, defined on the CPU only by its one thread.
        # Those reads are made at the loop's own index here.
        tasks = [(_owned_reads(lines), python) for lines, python in tasks]
        kernel = bz.kernel(fuzz.load(fuzz.render(arrays, tasks, python=False)))
        host = fuzz.inputs(arrays, 5)
        expected = [a.copy() if isinstance(a, np.ndarray) else a for a in host]
        kernel(*expected)
        got = run_on_gpu(kernel, host, "device_array")
        # atomics add in another order on the GPU, and a normal's float64 log may differ in its last bit
        for g, e in zip(got[:-2], expected[:-2]):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5, equal_nan=True)

    check()
