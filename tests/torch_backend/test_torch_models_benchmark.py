"""benchmarks/torch_models.py end to end in its quick CPU mode (a subprocess, as it is run on a GPU
machine): every step timed on each backend, the losses agree, and the JSON holds the rows and ratios."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "torch_models.py"


def test_the_quick_cpu_run_times_each_backend_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "torch-models.json"
    env = {**os.environ, "BRAZE_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, str(BENCHMARK), "--cpu", "--quick", "--models", "mlp", "--backends", "eager,braze",
               "--warmup", "1", "--repeats", "2", "--out", str(out)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["quick"] is True
    eager, braze = result["rows"]
    assert (eager["backend"], braze["backend"]) == ("eager", "braze")
    for row in (eager, braze):
        assert "error" not in row, row
        assert all(row[step] > 0 for step in ("forward_backward_ms", "train_ms", "inference_ms"))
    assert braze["braze_fallbacks"] == []
    assert braze["first_loss"] == pytest.approx(eager["first_loss"], rel=1e-5)
    (ratios,) = result["ratios"]
    assert ratios["eager_over_braze_forward_backward_ms"] > 0


def test_an_unknown_model_or_backend_is_refused_by_name(capsys) -> None:
    spec = importlib.util.spec_from_file_location("torch_models", BENCHMARK)
    torch_models = sys.modules["torch_models"] = importlib.util.module_from_spec(spec)  # dataclasses look it up
    spec.loader.exec_module(torch_models)
    assert torch_models.main(["--cpu", "--models", "gpt5,mlp", "--backends", "braze,tvm"]) == 2
    assert "unknown model or backend: gpt5, tvm" in capsys.readouterr().err
