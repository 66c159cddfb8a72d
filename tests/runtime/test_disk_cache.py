"""The disk cache of compiled kernels: keys built from named parts, atomic writes, clearing."""

from __future__ import annotations

import os

import pytest

from braze import config, schedule
from braze.frontend.fusion import Fusion
from braze.kir import nodes as k
from braze.lower.kernel import lower
from braze.runtime import cpu, disk_cache
from braze.runtime.compiled_kernel import CompiledKernel, CompileParams


def _kernel(name: str = "keyed") -> k.Kernel:
    with Fusion() as f:
        x = f.define_tensor((-1,))
        f.add_output(x * 2.0)
    writes = [f.outputs[0].tv]
    kernel, _ = lower(f, writes, schedule.plan(f, set()).scheduled, {}, name)
    return kernel


def test_the_key_is_a_sha256_of_named_parts_in_any_order():
    key = disk_cache.cache_key(source="s", params=1, toolchain="t")
    assert len(key) == 64 and int(key, 16) >= 0
    assert key == disk_cache.cache_key(toolchain="t", params=1, source="s")
    assert key != disk_cache.cache_key(source="s", params=2, toolchain="t")
    assert key != disk_cache.cache_key(source="s", parms=1, toolchain="t")  # the names count too


@pytest.mark.parametrize("part", ["source", "params", "toolchain", "braze"])
def test_each_part_of_a_kernels_key_changes_it(part, monkeypatch):
    kernel = _kernel()
    before = CompiledKernel(kernel, CompileParams()).cache_key
    if part == "source":
        after = CompiledKernel(_kernel("renamed"), CompileParams()).cache_key
    elif part == "params":
        after = CompiledKernel(kernel, CompileParams(fast_math=True)).cache_key
    elif part == "toolchain":
        monkeypatch.setattr(cpu, "toolchain_id", lambda: "another llvm")
        after = CompiledKernel(kernel, CompileParams()).cache_key
    else:
        monkeypatch.setattr(disk_cache, "braze_source_hash", lambda: "0" * 64)  # braze itself changed
        after = CompiledKernel(kernel, CompileParams()).cache_key
    assert after != before


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    def interrupted(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", interrupted)
    with config.scope(cache_dir=tmp_path):
        disk_cache.store("ef" * 32, b"payload")
        assert disk_cache.load("ef" * 32) is None
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_reader_sees_the_old_entry_or_the_new_one_never_a_partial_one(tmp_path):
    with config.scope(cache_dir=tmp_path):
        disk_cache.store("12" * 32, b"old")
        (path,) = tmp_path.rglob("*.bin")
        inode = path.stat().st_ino
        disk_cache.store("12" * 32, b"new" * 1000)
        assert disk_cache.load("12" * 32) == b"new" * 1000
        assert path.stat().st_ino != inode  # replaced by a rename, not rewritten where readers read


def test_clear_removes_entries_and_leftover_temporary_files(tmp_path):
    with config.scope(cache_dir=tmp_path):
        disk_cache.store("34" * 32, b"one")
        disk_cache.store("56" * 32, b"two")
        (tmp_path / "34" / "killed-writer.tmp").write_bytes(b"half")
        assert disk_cache.clear() == 2
        assert disk_cache.load("34" * 32) is None
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
