"""A process forked after braze ran (a data loader's workers) runs braze too: its worker pools are
its own, not the parent's, whose threads it does not have."""

from __future__ import annotations

import os

import pytest

from braze.compile import compiled_kernel
from braze.runtime import thread_pool


def _exit_code_of_child(body) -> int:
    """Forks; the child runs `body()` (True: exit 0) and the parent waits for it."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os._exit(0 if body() else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")
@pytest.mark.parametrize("pool", [thread_pool._pool, compiled_kernel._pool], ids=["cpu", "compile"])
def test_a_forked_child_runs_work_on_a_pool_of_its_own(pool) -> None:
    assert pool().submit(int, "1").result() == 1  # the parent's pool has its threads running

    def child_runs_work() -> bool:
        return pool().submit(int, "2").result(timeout=10) == 2  # the parent's pool: a TimeoutError

    assert _exit_code_of_child(child_runs_work) == 0
