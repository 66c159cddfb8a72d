"""CUDA sources of generated programs, compiled with NVRTC in batches on a second thread while the
generator goes on (NVRTC releases the GIL). Each batch is one translation unit (the prelude is parsed
once a batch), compiled to PTX without optimization (`-G`: the front end and NVVM's code generation,
as `BRAZE_OPS_BACKEND=nvrtc` does for the op suite); the programs of a failing batch are compiled one
by one to name the failing ones."""

from __future__ import annotations

import re
from concurrent.futures import Future, ThreadPoolExecutor

from braze.errors import CompileError

BATCH = 60
# NVRTC errors of known bugs, each with the xfail test that holds its smallest program: a generated
# program that hits one is counted, not failed, so the rest of the space stays tested.
KNOWN_BUGS: dict[str, str] = {}


def known_bug(message: str) -> str | None:
    return next((test for text, test in KNOWN_BUGS.items() if text in message), None)


def renamed(body: str, functions: tuple[str, ...], suffix: str) -> str:
    """The kernel functions of `body` renamed apart, so many programs fit one translation unit."""
    for name in functions:
        body = re.sub(rf"\b{re.escape(name)}\b", f"{name}_{suffix}", body)
    return body


def compile_sources(bodies: list[str]) -> None:
    from braze.codegen.cuda import with_prelude
    from braze.compile import nvrtc

    nvrtc.compile_ptx(with_prelude("\n".join(bodies)), "fuzz", "sm_90", ("-G",))


def compile_batch(batch: list[tuple[str, str]]) -> list[str]:
    """The failures of one batch of (listing, renamed body): each listing with NVRTC's message."""
    try:
        compile_sources([body for _, body in batch])
        return []
    except CompileError:
        failures = []
        for listing, body in batch:
            try:
                compile_sources([body])
            except CompileError as e:
                failures.append(f"{listing}\n{e}")
        return failures


def unknown(failures: list[str]) -> list[str]:
    return [failure for failure in failures if known_bug(failure) is None]


class CudaBatches:
    """Collects (program listing, CudaSource) pairs and compiles them as they come, in batches."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, str]] = []
        self.futures: list[Future] = []
        self.seen: set[str] = set()
        self.programs = 0
        self.pool = ThreadPoolExecutor(max_workers=1)

    def add(self, listing: str, source) -> None:
        self.programs += 1
        if source.body in self.seen:
            return
        self.seen.add(source.body)
        self.pending.append((listing, renamed(source.body, source.functions, f"p{len(self.seen)}")))
        if len(self.pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.futures.append(self.pool.submit(compile_batch, self.pending))
            self.pending = []

    def finish(self) -> list[str]:
        """Waits for every batch; the failures, each with its program (known bugs among them)."""
        self.flush()
        try:
            return [failure for future in self.futures for failure in future.result()]
        finally:
            self.pool.shutdown()
