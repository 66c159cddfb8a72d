"""The `braze` command: `demo` on the compiled backend, `info`, and `cache` (show and clear)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import braze as bz
from braze import cli, config, engine
from braze.demo import GALLERY


def _rows(text: str) -> dict[str, list[str]]:
    """A printed table as first cell -> the other cells."""
    return {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()}


def test_demo_runs_every_fusion_compiled_with_kernels_time_and_speed_up(capsys, monkeypatch):
    monkeypatch.setattr(cli, "particle_step_demo", lambda: True)  # the @bz.kernel part is tested on its own
    assert cli.main(["demo", "--backend", "llvm"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[:3] == ["fusion", "ops", "kernels"] and "ms/call" in header and "speed-up" in header
    rows = _rows(out)
    for entry in GALLERY:
        ops, kernels, error, backend, ms, numpy_ms, speedup = rows[entry.name]
        assert backend == "llvm" and 1 <= int(kernels) < int(ops)  # fused: fewer kernels than ops
        assert float(error) < 1e-3 and float(ms) > 0 and speedup.endswith("x")


def test_info_shows_versions_backends_and_the_cache_folder(capsys, tmp_path):
    with config.scope(cache_dir=tmp_path / "kernels"):
        assert cli.main(["info"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["cache"] == ["folder", str(tmp_path / "kernels")]
    assert " ".join(rows["backends"]) == ", ".join(sorted(engine.BACKENDS))
    assert "NVRTC" in rows and ("GPU" in rows or "cuda:0" in rows)  # what was found, or that none was
    assert rows["default"] == ["backend", engine.DEFAULT_BACKEND]
    assert rows["llvmlite"][0][0].isdigit() and rows["numpy"] == [np.__version__]


def _compile_something(name: str) -> list[str]:
    """Compiles a new fusion (no kernel held in memory) and returns what was compiled."""
    engine.forget_compiled_kernels()
    with bz.Fusion(name=name) as f:
        f.add_output(bz.ops.exp(f.define_tensor((-1,))) * 5.0)
    with bz.record() as rec:
        f.execute([np.ones(8, np.float32)])
    return rec.compiles


def test_cache_clear_empties_the_cache_folder(capsys, tmp_path):
    with config.scope(cache_dir=tmp_path):
        assert _compile_something("cleared") == ["cleared"]
        assert _compile_something("cleared") == []  # loaded from the disk cache
        entries = len(list(tmp_path.rglob("*.bin")))  # the kernel, and any host function's object code
        assert entries >= 1
        size = sum(p.stat().st_size for p in tmp_path.rglob("*.bin"))
        for show in (["cache"], ["cache", "show"]):
            assert cli.main(show) == 0
            assert capsys.readouterr().out == (f"{tmp_path}: {entries} entries, {size / 1e6:.1f} MB of a "
                                               f"{config.current.cache_max_bytes / 1e6:.1f} MB cap "
                                               "(BRAZE_CACHE_MAX_BYTES)\n")
        assert cli.main(["cache", "clear"]) == 0
        assert capsys.readouterr().out.strip() == f"removed {entries} entries from {tmp_path}"
        assert not list(tmp_path.rglob("*.bin"))
        assert _compile_something("cleared") == ["cleared"]  # compiled again


def test_cache_show_says_when_the_folder_is_refused(capsys, tmp_path):
    tmp_path.chmod(0o777)
    with config.scope(cache_dir=tmp_path):
        assert cli.main(["cache", "show"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == \
        f"refused (the disk cache is off): {tmp_path} is writable by group or others (mode 777)"


def test_every_cache_action_has_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["cache", "--help"])
    text = capsys.readouterr().out
    assert re.search(r"show\s+print the cache folder", text) and re.search(r"clear\s+remove every entry", text)
