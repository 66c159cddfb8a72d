"""The gallery under examples/ runs as written and checks itself against NumPy (each example asserts
its own result); this keeps every example working."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GALLERY = ["monte_carlo.py", "cloth.py", "sph.py"]


@pytest.mark.parametrize("name", GALLERY)
def test_example_runs_and_agrees_with_numpy(name, capsys):
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert "NumPy" in capsys.readouterr().out  # each example says what it was checked against


def test_every_example_is_in_the_gallery():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted([*GALLERY, "quickstart.py"])
