"""The CUDA backend's launch under bz.record() (runtime/backends/cuda.py), with the driver's events
faked: a launch is noted, timed only when profiling, and its bandwidth is the bytes it was given
over that time; an empty launch is noted and neither made nor timed."""

from __future__ import annotations

import braze as bz
from braze.compile import cuda_driver
from braze.record import RecordedLaunch
from braze.runtime.backends.cuda import recorded_launch


def test_a_launch_is_noted_and_timed_only_when_profiling(monkeypatch) -> None:
    events: list[tuple[str, int]] = []
    monkeypatch.setattr(cuda_driver, "Event", object)
    monkeypatch.setattr(cuda_driver, "record_event", lambda event, stream=0: events.append(("event", stream)))
    monkeypatch.setattr(cuda_driver, "elapsed_ms", lambda start, end: 0.5)
    made = []
    with bz.record() as plain:
        recorded_launch(RecordedLaunch("k", "t0", 0, 8, 1), 7, lambda: made.append("t0"), lambda: 1 << 20)
    assert made == ["t0"] and events == [] and plain.launches[0].device_ms is None
    with bz.record(profile=True) as profiled:
        recorded_launch(RecordedLaunch("k", "t0", 0, 8, 1), 7, lambda: made.append("t0"), lambda: 1_000_000)
        recorded_launch(RecordedLaunch("k", "t1", 0, 0, 0), 7, None)  # an empty range: nothing to launch
    assert made == ["t0", "t0"] and events == [("event", 7), ("event", 7)]
    timed, empty = profiled.launches
    assert (timed.task, timed.device_ms, timed.gbps) == ("t0", 0.5, 2.0)  # 1 MB in half a millisecond
    assert (empty.task, empty.device_ms, empty.gbps) == ("t1", None, None)
