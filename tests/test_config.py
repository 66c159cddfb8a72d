"""Knobs are declared once and typed: an unknown name is an error, and every declared dump is produced."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from source_trees import parse_files

import braze as bz
from braze import config, engine
from braze.compile import nvrtc
from braze.compile.compiled_kernel import CompileParams
from braze.compile.cuda_kernel import CudaCompiledKernel


def test_every_field_of_the_config_has_one_knob():
    fields = [k.field for k in config.KNOBS]
    assert sorted(fields) == sorted(config.Config.__dataclass_fields__) and len(set(fields)) == len(fields)
    assert all(k.env.startswith("BRAZE_") and k.help for k in config.KNOBS)


def test_the_environment_is_read_by_the_table():
    read = config.Config.from_environment({"BRAZE_DUMP": "kernel_ir, segments", "BRAZE_FUSE_TASKS": "0",
                                           "BRAZE_CACHE_MAX_BYTES": "512M", "BRAZE_DEBUG": "1",
                                           "BRAZE_FUSE_TASKS_BUDGET": "12"})
    assert read.dump == {"kernel_ir", "segments"} and not read.fuse_tasks and read.debug
    assert read.cache_max_bytes == 512 << 20 and read.fuse_tasks_budget == 12
    assert config.Config.from_environment({}) == config.Config()


@pytest.mark.parametrize("variable, value, message", [
    ("BRAZE_DUMP", "kernel_ir,kernl_ir", r"BRAZE_DUMP: unknown name\(s\) kernl_ir; expected some of"),
    ("BRAZE_DISABLE", "fastcall", r"BRAZE_DISABLE: unknown name\(s\) fastcall"),
    ("BRAZE_ENABLE", "poison", r"BRAZE_ENABLE: unknown name\(s\) poison"),
    ("BRAZE_FUSE_TASKS_BUDGET", "many", "BRAZE_FUSE_TASKS_BUDGET: expected a whole number, got 'many'"),
    ("BRAZE_CACHE_MAX_BYTES", "lots", "BRAZE_CACHE_MAX_BYTES: expected a number of bytes"),
    ("BRAZE_DISABLE", "fast_math", r"unknown name\(s\) fast_math; .* \(fast_math is a feature of BRAZE_ENABLE\)"),
    ("BRAZE_ENABLE", "disk_cache", r"unknown name\(s\) disk_cache; .* \(disk_cache is a feature of BRAZE_DISABLE\)"),
    ("BRAZE_FUSE_TASKS", "flase", r"BRAZE_FUSE_TASKS: expected 1 or 0 \(or true/false, on/off, yes/no\), got 'flase'"),
    ("BRAZE_DEBUG", "2", "BRAZE_DEBUG: expected 1 or 0"),
])
def test_a_typo_in_a_knob_is_an_error(variable, value, message):
    with pytest.raises(bz.InputError, match=message):
        config.Config.from_environment({variable: value})


@pytest.mark.parametrize("text, on", [("1", True), ("yes", True), (" On ", True), ("0", False), ("false", False),
                                      ("NO", False), ("", True)])
def test_an_on_off_knob_reads_the_usual_spellings(text, on):
    assert config.Config.from_environment({"BRAZE_FUSE_TASKS": text}).fuse_tasks is on


def test_scope_checks_names_too():
    with pytest.raises(bz.InputError, match=r"dump: unknown name\(s\) kernel"), config.scope(dump="kernel"):
        pass


def test_asking_for_an_undeclared_feature_or_dump_is_a_bug():
    with pytest.raises(ValueError, match="unknown feature 'fastcall'"):
        config.disabled("fastcall")
    with pytest.raises(ValueError, match="unknown feature 'fast_math' of BRAZE_DISABLE"):
        config.disabled("fast_math")
    with pytest.raises(ValueError, match="unknown dump 'kernelir'"):
        config.dumping("kernelir")


@bz.kernel
def two_loops(a: bz.Array[bz.float32, 1]):
    for i in range(a.shape[0]):
        a[i] += 1.0
    for i in range(a.shape[0]):
        a[i] *= 2.0


def _run_everything(tmp_path) -> None:
    with bz.Fusion(name="dumped") as f:
        x = f.define_tensor((-1, -1))
        f.add_output(bz.ops.softmax(x, -1))
    for rows in (3, 5, 7):  # shape functions tier up to native code (host_jit) after the first call
        f.execute([np.ones((rows, 4), np.float32)])
    two_loops(np.ones(5, np.float32))
    if nvrtc.available():
        _, kernel, _ = engine.plan_kernel(f, engine.signature(f, engine.bind_inputs(f, [np.ones((3, 4), np.float32)])),
                                          views_on_host=False)
        CudaCompiledKernel(kernel, CompileParams(block_size=256, arch="sm_90")).compile()


def test_every_declared_dump_is_produced(tmp_path, capfd):
    cuda_only = {"cuda_kernel", "ptx", "cuda_to_file"}
    names = sorted(config.DUMP_NAMES - (set() if nvrtc.available() else cuda_only))
    with config.scope(dump=",".join(names), cache_dir=tmp_path, disable="disk_cache"):
        engine.forget_compiled_kernels()
        _run_everything(tmp_path)
    err = capfd.readouterr().err
    missing = [n for n in names if n != "cuda_to_file" and f"===== braze dump: {n} =====" not in err]
    assert not missing, f"declared dumps never produced: {missing}"
    if "cuda_to_file" in names:
        assert list((tmp_path / "dump").glob("*.cu"))


def test_every_knob_name_in_the_source_is_declared():
    """A feature or dump named in braze's source is declared, even where no test reaches the line
    (`config.disabled("fastcall")` in a rare branch would raise only when that branch runs)."""
    asks = {"enabled": config.ENABLE_NAMES, "disabled": config.DISABLE_NAMES, "dumping": config.DUMP_NAMES}
    found, unknown = 0, []
    for path, tree in parse_files(sorted(Path(bz.__file__).parent.rglob("*.py"))).items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in asks
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "config"):
                continue
            name = node.args[0]
            if not isinstance(name, ast.Constant):
                unknown.append(f"{path}:{node.lineno}: a knob name that is not a literal")
            elif name.value not in asks[node.func.attr]:
                unknown.append(f"{path}:{node.lineno}: {name.value!r}")
            found += 1
    assert found > 20 and not unknown, unknown
