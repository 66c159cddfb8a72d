"""`bz_trips` of the CUDA prelude (codegen/prelude.cuh), which counts a walk's steps before its loop so
the unrolled copies need no exit test between them: built with g++ against tests/cuda_on_cpu.h and
checked against Python's `len(range(first, end, stride))` for int, unsigned and 64-bit indices,
strides that are powers of two (lanes, blocks: a shift) and others (a division), empty ranges."""

from __future__ import annotations

import ctypes

import pytest
from cuda_on_cpu import _prelude_header, available, shared_library
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(not available(), reason="needs g++")

_SOURCE = """
extern "C" void run_trips(const long long* args, long long first, long long end, long long stride, long long kind) {
  long long* out = (long long*)args;
  if (kind == 0) out[0] = bz_trips((int)first, (int)end, (unsigned)stride);
  else if (kind == 1) out[0] = (long long)bz_trips((unsigned)first, (unsigned)end, (unsigned)stride);
  else out[0] = bz_trips(first, (unsigned long long)end, (unsigned)stride);
}
"""
KINDS = {"int": 0, "unsigned": 1, "long long": 2}


def _trips(first: int, end: int, stride: int, kind: str) -> int:
    lib = shared_library(_prelude_header() + _SOURCE, ["trips"], 4, prefix="trips_")
    out = (ctypes.c_longlong * 1)()
    lib.run_trips(ctypes.addressof(out), first, end, stride, KINDS[kind])
    return out[0]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3000), st.integers(-5, 5000), st.one_of(st.sampled_from([1, 2, 32, 128, 1024, 4096]),
                                                              st.integers(1, 700)),
       st.sampled_from(list(KINDS)))
def test_trips_count_the_steps_of_a_strided_range(first, end, stride, kind):
    end = max(end, 0) if kind != "int" else end
    assert _trips(first, end, stride, kind) == len(range(first, end, stride))
