"""The `braze` command: `demo` on the compiled backend, `info`, `--version`, help, and `cache` (show and clear)."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest

import braze as bz
from braze import cli, config, engine
from braze.cli.gallery import GALLERY, _erf_polynomial, numpy_erf


def _rows(text: str) -> dict[str, list[str]]:
    """A printed table as first cell -> the other cells."""
    return {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.strip()}


def test_demo_runs_every_fusion_compiled_with_sizes_first_call_and_cached_time(capsys, monkeypatch):
    monkeypatch.setattr(cli, "particle_step_demo", lambda: True)  # the @bz.kernel part is tested on its own
    assert cli.main(["demo", "--backend", "llvm"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert header.split()[:4] == ["fusion", "input", "ops", "kernels"]
    assert "first call ms" in header and "ms/call" in header and "speed-up" in header
    rows = _rows(out)
    for entry in GALLERY:
        size, ops, kernels, error, backend, first_ms, ms, numpy_ms, speedup = rows[entry.name]
        shape = entry.inputs(np.random.default_rng(0))[0].shape
        assert size == "x".join(map(str, shape))
        assert backend == "llvm" and 1 <= int(kernels) < int(ops)  # fused: fewer kernels than ops
        assert float(error) < 1e-3 and float(first_ms) > 0 and float(ms) > 0 and speedup.endswith("x")
    assert f"its erf (gelu_bias) is {numpy_erf()[0]}" in " ".join(out.split())


def test_the_numpy_erf_without_scipy_is_a_vectorized_expression_accurate_to_2e_7():
    x = np.linspace(-6, 6, 20001)
    assert np.max(np.abs(_erf_polynomial(x) - np.vectorize(math.erf)(x))) < 2e-7
    name, erf = numpy_erf()
    assert erf is _erf_polynomial or name == "scipy.special.erf"


def test_demo_on_an_unusable_backend_says_why_and_fails(capsys, monkeypatch):
    monkeypatch.setattr(cli, "_cuda_status", lambda: (False, "no NVIDIA GPU found (none here)"))
    assert cli.main(["demo", "--backend", "cuda"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == "braze demo: the cuda backend is not usable here: no NVIDIA GPU found (none here)"


def test_demo_on_an_unknown_backend_is_a_usage_error_without_a_traceback():
    run = subprocess.run([sys.executable, "-m", "braze.cli", "demo", "--backend", "foo"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert "invalid choice: 'foo'" in run.stderr and "Traceback" not in run.stderr


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"braze {bz.__version__}"


@pytest.mark.parametrize("command", [[], ["demo"], ["info"], ["cache"]])
def test_every_command_has_help(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        cli.main([*command, "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith(f"usage: braze {' '.join(command)}".rstrip())
    if not command:
        assert all(name in out for name in ("demo", "info", "cache", "--version"))


def test_info_shows_versions_backends_and_the_cache_folder(capsys, tmp_path):
    with config.scope(cache_dir=tmp_path / "kernels"):
        assert cli.main(["info"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["cache"] == ["folder", str(tmp_path / "kernels")]
    for backend in engine.BACKENDS:  # each says whether it runs here, and what on or why not
        assert rows[backend][0] in ("usable:", "not") and len(rows[backend]) > 2
    assert rows["llvm"][0] == "usable:" and rows["reference"][0] == "usable:"
    assert "NVRTC" in rows
    assert rows["default"] == ["backend", engine.DEFAULT_BACKEND]
    assert rows["llvmlite"][0][0].isdigit() and rows["numpy"] == [np.__version__]


def test_info_says_why_cuda_is_not_usable_without_a_gpu(capsys, monkeypatch):
    from braze.compile import cuda_driver

    if cuda_driver.device_count():
        pytest.skip("a GPU is here")
    assert cli.main(["info"]) == 0
    cuda = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("cuda "))
    assert cuda.split(None, 1)[1].startswith("not usable: no NVIDIA GPU found (")
    assert cli.backend_status()["cuda"][0] is False


def _compile_something(name: str) -> list[str]:
    """Compiles a new fusion (no kernel held in memory) and returns what was compiled."""
    engine.forget_compiled_kernels()
    with bz.Fusion(name=name) as f:
        f.add_output(bz.ops.exp(f.define_tensor((-1,))) * 5.0)
    with bz.record() as rec:
        f.execute([np.ones(8, np.float32)])
    return rec.compiles


def test_cache_clear_empties_the_cache_folder(capsys, tmp_path):
    with config.scope(cache_dir=tmp_path, cache_max_bytes=1 << 30):
        assert _compile_something("cleared") == ["cleared"]
        assert _compile_something("cleared") == []  # loaded from the disk cache
        entries = len(list(tmp_path.rglob("*.bin")))  # the kernel, and any host function's object code
        assert entries >= 1
        size = sum(p.stat().st_size for p in tmp_path.rglob("*.bin"))
        for show in (["cache"], ["cache", "show"]):
            assert cli.main(show) == 0
            assert capsys.readouterr().out == (f"{tmp_path}: {entries} entries, {cli.byte_size(size)} of a "
                                               "1.0 GiB cap (BRAZE_CACHE_MAX_BYTES)\n")
        assert cli.main(["cache", "clear"]) == 0
        assert capsys.readouterr().out.strip() == f"removed {entries} entries from {tmp_path}"
        assert not list(tmp_path.rglob("*.bin"))
        assert _compile_something("cleared") == ["cleared"]  # compiled again


def test_sizes_are_shown_in_the_units_the_cap_is_set_in():
    assert [cli.byte_size(n) for n in (0, 1023, 1536, 512 << 20, 1 << 30, 5 << 30)] == \
        ["0 bytes", "1023 bytes", "1.5 KiB", "512.0 MiB", "1.0 GiB", "5.0 GiB"]
    set_in_megabytes = config.Config.from_environment({"BRAZE_CACHE_MAX_BYTES": "512M"}).cache_max_bytes
    assert cli.byte_size(set_in_megabytes) == "512.0 MiB"


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


def test_info_lists_every_knob(capsys):
    from braze import cli, config

    assert cli.main(["info", "--knobs"]) == 0
    out = capsys.readouterr().out
    assert all(k.env in out and k.help.split(":")[0] in out for k in config.KNOBS)
    switched = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.split()[1:2] in
                (["BRAZE_ENABLE"], ["BRAZE_DISABLE"])}
    assert switched == {name: "BRAZE_ENABLE" if name in config.ENABLE_NAMES else "BRAZE_DISABLE"
                        for name in config.FEATURES}
