"""The gallery under examples/ runs as written and checks itself against NumPy (each example asserts
its own result); this keeps every example working."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from torchrun import run_data_parallel

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GALLERY = ["monte_carlo.py", "cloth.py", "sph.py"]
RUN_BY_TORCHRUN = ["data_parallel.py"]  # tested below and in tests/cuda/test_data_parallel.py


@pytest.mark.parametrize("name", GALLERY)
def test_example_runs_and_agrees_with_numpy(name, capsys):
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert "NumPy" in capsys.readouterr().out  # each example says what it was checked against


def test_every_example_is_in_the_gallery():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted([*GALLERY, *RUN_BY_TORCHRUN, "quickstart.py"])


def test_data_parallel_training_on_two_cpu_processes_equals_eager():
    """Two ranks over gloo: braze's fused twin trains as the eager one does, step by step."""
    pytest.importorskip("torch")
    result = run_data_parallel(2, "--cpu", "--steps", "6")
    assert result["braze_launches"] > 0, "the compiled model ran no braze kernel"
    assert len(result["losses"]) == 6 and result["losses"][-1] < result["losses"][0]
    assert result["loss_relative_difference"] < 1e-5 and result["parameter_relative_difference"] < 1e-5
