"""The fusion suite (braze/cli/bench/): its CPU section end to end on a few cases, through
benchmarks/suite.py and through `braze bench` (subprocesses, as `make gpu-bench` and a user run
them), and how its check reports a wrong or failing result instead of stopping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from braze.cli.bench import check as suite_check
from braze.cli.bench.cases import CASES

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

QUICK_CASES = ("rope", "layer_norm_backward", "dropout_residual_layer_norm")


def test_the_cpu_section_checks_and_times_each_case(tmp_path):
    out = tmp_path / "suite.json"
    env = {**os.environ, "BRAZE_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, str(BENCHMARKS / "suite.py"), "--cpu", "--quick", "--repeats", "2",
               "--cases", ",".join(QUICK_CASES), "--out", str(out)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert [r["case"] for r in result["rows"]] == list(QUICK_CASES)
    for row in result["rows"]:
        for who in ("braze", "numpy"):
            assert row[who]["status"] == "ok", (row["case"], who, row[who])
            assert row[who]["gbps"] > 0
        assert row["bytes"] > 0
    assert result["copy_gbps"] > 0 and result["summary"]["vs"]["numpy"]["cases"] == len(QUICK_CASES)
    assert "braze / NumPy: geometric mean" in run.stdout


def test_braze_bench_runs_the_suite_and_writes_under_the_current_folder(tmp_path):
    env = {**os.environ, "BRAZE_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "braze.cli", "bench", "--cpu", "--quick", "--repeats", "2", "--cases", "rope"]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[1/1] rope" in run.stdout  # a line per case as it goes
    result = json.loads((tmp_path / "braze-bench" / "suite-cpu-quick.json").read_text())
    assert [r["case"] for r in result["rows"]] == ["rope"] and result["rows"][0]["braze"]["status"] == "ok"
    usage = subprocess.run([sys.executable, "-m", "braze.cli", "bench", "--help"], capture_output=True, text=True)
    assert usage.returncode == 0 and "usage: braze bench" in usage.stdout and "--cases" in usage.stdout


def test_the_suite_has_25_fusions_or_more_in_both_float_types():
    assert len(CASES) >= 25 and len({c.name for c in CASES}) == len(CASES)
    assert {c.dtype for c in CASES} == {"float32", "bfloat16"}


def test_a_wrong_result_is_reported_and_not_timed():
    want = [np.arange(6.0).reshape(2, 3)]
    poisoned = np.full((2, 3), np.nan)
    timed = []
    cell = suite_check.measure(lambda: [(poisoned, "float32")], lambda: timed.append(1) or 1.0, want, 48)
    assert cell["status"] == "WRONG" and "not finite" in cell["error"] and not timed
    off = want[0] + np.array([0, 0, 1e-2])
    assert suite_check.measure(lambda: [(off, "float32")], lambda: 1.0, want, 48)["status"] == "WRONG"
    assert suite_check.measure(lambda: [(want[0] + 1e-6, "float32")], lambda: 2.0, want, 48) == {
        "status": "ok", "ms": 2.0, "gbps": 48 / 2.0 / 1e6}


def test_a_failure_is_reported_with_the_first_line_of_its_exception():
    def fails():
        raise RuntimeError("NVRTC: 'g0_j3' has already been declared\nmore detail")
    cell = suite_check.measure(fails, lambda: 1.0, [], 0)
    assert cell == {"status": "FAIL", "error": "RuntimeError: NVRTC: 'g0_j3' has already been declared"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_case_defines_a_fusion_and_a_reference(case):
    prepared = suite_check.Prepared(case, "quick")
    assert prepared.fusion is not None, prepared.build_error
    assert len(prepared.want) == len(prepared.fusion.returned_outputs)


# --- what the suite found ---------------------------------------------------------------------------
def test_group_norm_through_a_reshape_runs_in_linear_time(tmp_path):
    """group_norm written as reshape([N, G, -1]) + layer_norm once recomputed each group's mean and
    variance for every element (the group index reads the element only through a floor division):
    20 s for (2, 64, 32, 32). The statistics are now a task of their own."""
    script = textwrap.dedent("""
        import numpy as np, braze as bz
        with bz.Fusion() as f:
            x = f.define_tensor((-1, -1, -1, -1))
            grouped = bz.ops.reshape(x, [x.shape[0], 32, -1])
            f.add_output(bz.ops.reshape(bz.ops.layer_norm(grouped, eps=1e-5), x.shape))
        x = np.random.default_rng(0).standard_normal((2, 64, 32, 32)).astype(np.float32)
        (y,) = f.execute([x], backend="llvm")
        g = x.reshape(2, 32, -1).astype(np.float64)
        want = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
        assert np.abs(y - want).max() < 1e-4
    """)
    env = {**os.environ, "BRAZE_CACHE_DIR": str(tmp_path)}
    try:  # a hang check in a subprocess, not a timing: linear time is a few milliseconds here
        subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("group_norm of (2, 64, 32, 32) through a reshape took more than 15 s")


def test_the_model_shapes_name_cases_and_each_builds_its_fusion_at_its_shape():
    """`--models` runs every case that has a model shape; a misspelt name would drop its case unseen."""
    from braze.cli.bench.cases import MODEL_SHAPES, selected
    assert set(MODEL_SHAPES) <= {c.name for c in CASES}
    chosen = selected(None, "models")
    assert [c.name for c in chosen] == [c.name for c in CASES if c.name in MODEL_SHAPES]
    for case in chosen:
        assert suite_check.build_fusion(case, case.shape("models")) is not None
