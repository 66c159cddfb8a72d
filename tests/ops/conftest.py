"""Under BRAZE_OPS_BACKEND=nvrtc, the CUDA source of every fusion the op tests ran is compiled with
NVRTC once they are done: in batches (one translation unit holds many kernels, so the prelude and
headers are parsed once a batch), and any kernel of a failing batch is compiled alone to name it."""

from __future__ import annotations

import re

import pytest

import oracle

BATCH = 150


def _renamed(body: str, functions: tuple[str, ...], suffix: str) -> str:
    for name in functions:
        body = re.sub(rf"\b{re.escape(name)}\b", f"{name}_{suffix}", body)
    return body


def _compile(bodies: list[str]) -> None:
    from braze.codegen.cuda import PRELUDE
    from braze.runtime import nvrtc

    nvrtc.compile_cubin(PRELUDE + "\n".join(bodies), "op_suite", "sm_90")


def _failures(cases: list[tuple[str, str]]) -> list[str]:
    from braze.errors import CompileError

    found = []
    for test, body in cases:
        try:
            _compile([body])
        except CompileError as e:
            found.append(f"{test}:\n{e}")
    return found


@pytest.fixture(scope="session", autouse=True)
def compile_collected_cuda():
    yield
    if oracle.BACKEND != "nvrtc" or not oracle.CUDA_SOURCES:
        return
    from braze.errors import CompileError

    unique: dict[str, tuple[str, str]] = {}
    for test, source in oracle.CUDA_SOURCES:
        unique.setdefault(source.body, (test, _renamed(source.body, source.functions, f"k{len(unique)}")))
    cases = list(unique.values())
    for start in range(0, len(cases), BATCH):
        batch = cases[start:start + BATCH]
        try:
            _compile([f"// {test}\n{body}" for test, body in batch])
        except CompileError:
            failures = _failures(batch)
            raise AssertionError("CUDA sources NVRTC rejects:\n" + "\n\n".join(failures[:5])) from None
