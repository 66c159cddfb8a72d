"""Runs examples/data_parallel.py under `torchrun` (one process a rank, a free port each time) and
returns the JSON line rank 0 prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data_parallel.py"


# What libstdc++ prints when a process exits with a C++ thread still joinable: torch's gloo
# transport does this now and then in its own teardown, after the training has finished.
TEARDOWN_ABORT = "terminate called without an active exception"


def run_data_parallel(ranks: int, *args: str, timeout: float = 240) -> dict:
    done = _torchrun(ranks, args, timeout)
    if done.returncode != 0 and TEARDOWN_ABORT in done.stderr:
        done = _torchrun(ranks, args, timeout)  # once: a second teardown abort fails the test
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"expected one JSON line from rank 0, got:\n{done.stdout[-4000:]}"
    return json.loads(lines[0])


def _torchrun(ranks: int, args: tuple[str, ...], timeout: float) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": os.pathsep.join([str(EXAMPLE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={ranks}", str(EXAMPLE), *args],
                          capture_output=True, text=True, timeout=timeout, env=environment)
