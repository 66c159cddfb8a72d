"""The native launch sequence of a prepared call (`native/launch_jit.py`), checked without a GPU:
its cuLaunchKernel is a Python callback with the same C signature that records every call."""

from __future__ import annotations

import ctypes

import pytest
from fake_driver import KERNELS_CONTEXT, FakeDriver

from braze import config
from braze.native.launch_jit import NEW_STREAM, STREAM_TABLES, native_launches

LAUNCHES = [(0x1000 + n, 10 + n, 128 * (n + 1), 16 * n, 0x9000 + 8 * n) for n in range(12)]


def test_every_launch_is_made_in_order_with_its_arguments() -> None:
    driver = FakeDriver()
    native = native_launches(driver.driver, LAUNCHES)
    assert native is not None
    assert native.call(0xABC) == 0
    assert driver.calls == [(f, g, 1, 1, b, 1, 1, s, 0xABC, p, None) for f, g, b, s, p in LAUNCHES]


@pytest.mark.parametrize("fail_at", [0, 5, 11])
def test_a_failed_launch_stops_the_sequence_and_says_which(fail_at: int) -> None:
    driver = FakeDriver(fail_at, code=700)
    native = native_launches(driver.driver, LAUNCHES)
    result = native.call(0)
    assert (result >> 16, result & 0xFFFF) == (fail_at, 700)
    assert len(driver.calls) == fail_at + 1


def test_one_function_serves_every_table() -> None:
    first, second = FakeDriver(), FakeDriver()
    a, b = native_launches(first.driver, LAUNCHES[:3]), native_launches(second.driver, LAUNCHES[5:])
    assert a.call.func is b.call.func
    assert b.call(7) == 0 and a.call(8) == 0
    assert [c[0] for c in first.calls] == [f for f, *_ in LAUNCHES[:3]] and len(second.calls) == 7


def test_an_empty_table_launches_nothing() -> None:
    driver = FakeDriver()
    assert native_launches(driver.driver, []).call(0) == 0 and driver.calls == []


def test_the_host_jit_can_be_disabled_and_dumped(capsys) -> None:
    driver = FakeDriver()
    with config.scope(disable="host_jit"):
        assert native_launches(driver.driver, LAUNCHES) is None
    with config.scope(dump="host_jit"):
        native_launches(driver.driver, LAUNCHES[:1])
    dumped = capsys.readouterr().err
    assert "braze dump: host_jit" in dumped and "function 0x1000 grid 10 block 128 shared 0 params 0x9000" in dumped


def test_the_patched_launch_writes_each_value_at_its_slot_then_launches() -> None:
    driver = FakeDriver()
    block = (ctypes.c_int64 * 8)(*range(100, 108))
    slots = [6, 1, 3]
    native = native_launches(driver.driver, LAUNCHES[:2], ctypes.addressof(block), slots)
    assert native.patched is not None
    assert native.patched(0x55, 0x7F00_0000_1000, 2**64 - 8, 0) == 0
    assert list(block) == [100, -8, 102, 0, 104, 105, 0x7F00_0000_1000, 107]  # unsigned values wrap to int64
    assert driver.calls == [(f, g, 1, 1, b, 1, 1, s, 0x55, p, None) for f, g, b, s, p in LAUNCHES[:2]]


def test_the_patched_launch_refuses_wrong_arguments_before_launching() -> None:
    driver = FakeDriver(fail_at=1, code=719)
    block = (ctypes.c_int64 * 2)()
    native = native_launches(driver.driver, LAUNCHES[:3], ctypes.addressof(block), [0, 1])
    assert native.patched(0, 1) == -1 and native.patched(0, 1, 2, 3) == -1  # the count
    with pytest.raises(TypeError):
        native.patched(0, 1, "not a pointer")
    assert driver.calls == []
    result = native.patched(0, 1, 2)
    assert (result >> 16, result & 0xFFFF) == (1, 719) and len(driver.calls) == 2
    assert native_launches(driver.driver, LAUNCHES[:3], ctypes.addressof(block)).patched is None  # no slots


@pytest.mark.parametrize("patched", [False, True])
def test_the_kernels_context_is_made_current_when_another_is(patched: bool) -> None:
    """User code (torch.cuda.set_device, another library) may leave another context current between
    calls: the launches are made in the kernels' own, checked on every call, set only when needed."""
    driver = FakeDriver(current=0xD1)
    block = (ctypes.c_int64 * 2)()
    native = native_launches(driver.driver, LAUNCHES[:2], ctypes.addressof(block), [0] if patched else [])
    run = (lambda: native.patched(0, 5)) if patched else (lambda: native.call(0))
    assert run() == 0
    assert driver.contexts == [KERNELS_CONTEXT] * 2  # launched in the kernels' context...
    assert driver.sets == [KERNELS_CONTEXT, 0xD1] and driver.current == 0xD1  # ...and the user's restored
    driver.current = KERNELS_CONTEXT
    assert run() == 0 and len(driver.sets) == 2  # already current: nothing set
    driver.current = 0xD2
    assert run() == 0 and driver.sets[2:] == [KERNELS_CONTEXT, 0xD2] and driver.contexts == [KERNELS_CONTEXT] * 6


def test_a_failed_launch_still_restores_the_users_context() -> None:
    driver = FakeDriver(fail_at=1, code=700, current=0xD1)
    native = native_launches(driver.driver, LAUNCHES[:3])
    assert native.call(0) == (1 << 16) | 700 and driver.current == 0xD1


def test_a_context_that_cannot_be_made_current_launches_nothing() -> None:
    driver = FakeDriver(current=0xD1, set_code=201)  # CUDA_ERROR_INVALID_CONTEXT
    native = native_launches(driver.driver, LAUNCHES[:3])  # held: its call reads the table it owns
    result = native.call(0)
    assert (result >> 16, result & 0xFFFF) == (0, 201) and driver.calls == []


# --- a table per stream (kernels that take a grid reduction's workspace) ---------------------------
def on_stream(stream: int, count: int = 2) -> list[tuple]:
    """LAUNCHES' first `count` with parameters of `stream`'s own (as its workspace pointers would be)."""
    return [(f, g, b, s, p + (stream << 8)) for f, g, b, s, p in LAUNCHES[:count]]


def params(driver: FakeDriver) -> list[tuple[int, int]]:
    """(stream, parameter array) of each launch made."""
    return [(c[8], c[9]) for c in driver.calls]


def test_each_stream_launches_its_own_table_and_a_new_stream_launches_nothing() -> None:
    driver = FakeDriver()
    native = native_launches(driver.driver, on_stream(0xA), stream=0xA)
    assert native.call(0xB) == NEW_STREAM and native.call(0) == NEW_STREAM and driver.calls == []
    native.add_stream(0xB, on_stream(0xB))
    assert native.call(0xB) == 0 and native.call(0xA) == 0 and native.call(0xB) == 0
    assert params(driver) == [(0xB, p) for *_, p in on_stream(0xB)] + [(0xA, p) for *_, p in on_stream(0xA)] + \
        [(0xB, p) for *_, p in on_stream(0xB)]
    assert native.streams() == [0xA, 0xB]


def test_the_patched_launch_on_a_new_stream_writes_the_values_and_launches_nothing() -> None:
    driver = FakeDriver(current=0xD1)
    block = (ctypes.c_int64 * 2)()
    native = native_launches(driver.driver, on_stream(0xA), ctypes.addressof(block), [1], stream=0xA)
    assert native.patched(0xB, 77) == NEW_STREAM and list(block) == [0, 77] and driver.calls == []
    assert driver.current == 0xD1  # the user's context is current again
    native.add_stream(0xB, on_stream(0xB))
    assert native.patched(0xB, 78) == 0 and params(driver) == [(0xB, p) for *_, p in on_stream(0xB)]


def test_a_call_keeps_the_tables_of_its_latest_streams() -> None:
    driver = FakeDriver()
    native = native_launches(driver.driver, on_stream(1), stream=1)
    kept = [object() for _ in range(STREAM_TABLES + 3)]
    for stream in range(2, STREAM_TABLES + 4):
        native.add_stream(stream, on_stream(stream), kept[stream - 1])
    assert sorted(native.streams()) == list(range(4, STREAM_TABLES + 4))  # 1, 2 and 3 made room
    assert native.call(3) == NEW_STREAM and driver.calls == []
    native.add_stream(9, on_stream(9))  # filed again: in its own slot, nothing else goes
    assert sorted(native.streams()) == list(range(4, STREAM_TABLES + 4))
    assert native.call(9) == 0 and params(driver) == [(9, p) for *_, p in on_stream(9)]
    held = [keep for table, keep in native.held]
    assert kept[1] not in held and kept[STREAM_TABLES + 2] in held  # what a table points into lives with it


def test_a_streams_launches_must_be_as_many_as_every_streams() -> None:
    native = native_launches(FakeDriver().driver, on_stream(1), stream=1)
    with pytest.raises(ValueError, match="expected 2, got 3"):
        native.add_stream(2, on_stream(2, count=3))
