"""The disk cache of compiled kernels: keys built from named parts, atomic writes, clearing, and
the trust model: private folders, entries checked against their key, their file type, size and
object format before any code is mapped, a size cap with LRU eviction, dumps never written
through a link."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from braze import config, engine, schedule
from braze.compile import disk_cache, elf, llvm_toolchain, nvrtc
from braze.compile.compiled_kernel import CompiledKernel, CompileParams
from braze.frontend.fusion import Fusion
from braze.kir import nodes as k
from braze.lower.fusion_kernel import lower
from braze.record import record


def _kernel(name: str = "keyed", scale: float = 2.0) -> k.Kernel:
    with Fusion() as f:
        x = f.define_tensor((-1,))
        f.add_output(x * scale)
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
        monkeypatch.setattr(llvm_toolchain, "toolchain_id", lambda: "another llvm")
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


# --- the trust model ------------------------------------------------------------------------------------
KEY, OTHER_KEY = "ab" * 32, "cd" * 32


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _entry_file(scratch: Path, key: str, payload: bytes) -> Path:
    """A valid entry for `key`, written by the cache itself into the root `scratch`."""
    with config.scope(cache_dir=scratch):
        disk_cache.store(key, payload)
        return disk_cache._path(key)


def _plant(root: Path, key: str, source: Path) -> Path:
    """Copies an entry file into `root` by hand (as another process or user would)."""
    target = root / key[:2] / f"{key}.bin"
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.copyfile(source, target)
    return target


def _cache_warnings(caught) -> list[str]:
    from braze.errors import DiskCacheWarning

    return [str(w.message) for w in caught if issubclass(w.category, DiskCacheWarning)]


def test_folders_are_0700_and_entries_0600_whatever_the_umask(tmp_path):
    root = tmp_path / "made" / "cache"
    previous = os.umask(0)
    try:
        with config.scope(cache_dir=root):
            disk_cache.store(KEY, b"payload")
            assert disk_cache.load(KEY) == b"payload"
    finally:
        os.umask(previous)
    assert [_mode(p) for p in (tmp_path / "made", root, root / KEY[:2])] == [0o700] * 3
    assert _mode(root / KEY[:2] / f"{KEY}.bin") == 0o600


@pytest.mark.parametrize("shared", ["root", "shard"])
def test_a_folder_others_can_write_is_refused_with_one_warning(tmp_path, shared):
    entry = _entry_file(tmp_path / "scratch", KEY, b"payload")
    root = tmp_path / "shared"
    _plant(root, KEY, entry)
    (root if shared == "root" else root / KEY[:2]).chmod(0o777)
    with config.scope(cache_dir=root), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert disk_cache.load(KEY) is None  # a valid entry, in a folder anyone could have written it to
        disk_cache.store(OTHER_KEY, b"other")
        disk_cache.store(OTHER_KEY, b"other")
        assert disk_cache.load(OTHER_KEY) is None
    (message,) = _cache_warnings(caught)
    assert f"{root if shared == 'root' else root / KEY[:2]} is writable by group or others (mode 777)" in message
    assert not (root / OTHER_KEY[:2]).exists()


def test_a_folder_another_user_owns_is_refused_with_one_warning(tmp_path, monkeypatch):
    root = tmp_path / "theirs"
    _plant(root, KEY, _entry_file(tmp_path / "scratch", KEY, b"payload"))
    monkeypatch.setattr(disk_cache, "_current_uid", lambda: os.geteuid() + 1)  # the folders are another user's
    with config.scope(cache_dir=root), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert disk_cache.load(KEY) is None
        disk_cache.store(OTHER_KEY, b"other")
    (message,) = _cache_warnings(caught)
    assert f"{root} is owned by uid {os.geteuid()}" in message
    assert not (root / OTHER_KEY[:2]).exists()


def test_entries_swapped_between_keys_are_misses(tmp_path):
    twice, thrice = CompiledKernel(_kernel("swapped", 2.0)), CompiledKernel(_kernel("swapped", 3.0))
    with config.scope(cache_dir=tmp_path):
        twice.compile(), thrice.compile()
        a, b = disk_cache._path(twice.cache_key), disk_cache._path(thrice.cache_key)
        a_bytes, b_bytes = a.read_bytes(), b.read_bytes()
        a.write_bytes(b_bytes), b.write_bytes(a_bytes)  # same symbols, each the other's code
        again = CompiledKernel(_kernel("swapped", 2.0)).compile()
        assert not again.from_disk and again.binary == twice.binary
        assert disk_cache.load(thrice.cache_key) is None


def test_garbage_or_a_foreign_object_behind_a_valid_header_is_a_miss(tmp_path):
    kernel = _kernel("guarded")
    other = CompiledKernel(_kernel("another")).compile().binary  # a valid object without this kernel's symbols
    with config.scope(cache_dir=tmp_path):
        key = CompiledKernel(kernel).cache_key
        for payload in (b"\x7fELF" + b"\xff" * 4000, other[:200] + b"\0" * (len(other) - 200), other):
            disk_cache.store(key, payload)  # the right key and checksum over a wrong payload
            compiled = CompiledKernel(kernel).compile()
            assert not compiled.from_disk and compiled.binary != payload
        symbols = [task.name for task in kernel.tasks]
        assert len(compiled.functions) == 1 and disk_cache.load(key, elf.host_object_check(symbols))


def test_a_fifo_or_a_folder_in_place_of_an_entry_is_a_miss_without_waiting(tmp_path):
    with config.scope(cache_dir=tmp_path):
        path = disk_cache._path(KEY)
        path.parent.mkdir(mode=0o700)
        os.mkfifo(path, 0o600)
        loaded: list = []
        reader = threading.Thread(target=lambda: loaded.append(disk_cache.load(KEY)), daemon=True)
        reader.start()
        reader.join(2)
        hung = reader.is_alive()
        if hung:  # let the reader go: open the FIFO's other end and close it
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            reader.join()
        assert not hung and loaded == [None]
        path.unlink()
        path.mkdir(mode=0o700)
        assert disk_cache.load(KEY) is None


def test_a_link_in_place_of_an_entry_is_a_miss_even_to_a_valid_entry(tmp_path):
    entry = _entry_file(tmp_path / "scratch", KEY, b"payload")
    with config.scope(cache_dir=tmp_path / "cache"):
        disk_cache.store(OTHER_KEY, b"x")  # makes the cache folder
        path = disk_cache._path(KEY)
        path.parent.mkdir(mode=0o700)
        path.symlink_to(entry)
        assert disk_cache.load(KEY) is None  # a valid entry, but reached through a link
        path.unlink()
        path.symlink_to("/dev/zero")  # would read forever
        assert disk_cache.load(KEY) is None


def test_an_oversized_entry_is_a_miss_refused_before_reading(tmp_path, monkeypatch):
    with config.scope(cache_dir=tmp_path):
        disk_cache.store(KEY, b"x" * 4096)
        monkeypatch.setattr(disk_cache, "MAX_ENTRY_BYTES", 1024)
        monkeypatch.setattr(os, "read", lambda fd, n: pytest.fail(f"read {n} bytes of an oversized entry"))
        assert disk_cache.load(KEY) is None
        monkeypatch.undo()
        monkeypatch.setattr(disk_cache, "MAX_ENTRY_BYTES", 1024)
        disk_cache.store(OTHER_KEY, b"x" * 4096)  # nor is one stored
        assert not disk_cache._path(OTHER_KEY).exists()


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_a_cubin_must_define_the_kernels_it_is_loaded_for():
    cubin = nvrtc.compile_cubin('extern "C" __global__ void fill(float* x) { x[0] = 1; }', "fill", "sm_90")
    assert elf.cubin_check(["fill"])(cubin)
    assert not elf.cubin_check(["other"])(cubin)
    assert not elf.cubin_check(["fill"])(cubin[: len(cubin) // 2])
    assert not elf.host_object_check(["fill"])(cubin)  # a cubin is no host object
    assert elf.problem(cubin[:4] + b"\1" + cubin[5:], elf.ET_EXEC, elf.EM_CUDA, ["fill"]).startswith("ELF class 1")


def test_cuda_to_file_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    from braze.compile.cuda_kernel import CudaCompiledKernel

    with Fusion(name="dumped_safely") as f:
        f.add_output(f.define_tensor((-1,)) * 2.0)
    _, kernel, _ = engine.plan_kernel(f, (((True,),), "int32"), views_on_host=False)
    compiled = CudaCompiledKernel(kernel, CompileParams(arch="sm_90"))
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file")
    (dump := tmp_path / "dump").mkdir(mode=0o700)
    (name,) = compiled.generated.functions
    (dump / f"{name}.cu").symlink_to(victim)
    with config.scope(cache_dir=tmp_path):
        compiled._dump_to_file()
    assert victim.read_text() == "the user's own file"
    assert not (dump / f"{name}.cu").is_symlink() and (dump / f"{name}.cu").read_text() == compiled.source
    assert _mode(dump / f"{name}.cu") == 0o600


def test_least_recently_used_entries_are_evicted_beyond_the_cap(tmp_path):
    keys = [f"{i:02x}" * 32 for i in range(4)]
    entry_bytes = len(_entry_file(tmp_path / "scratch", keys[0], b"x" * 1000).read_bytes())
    with config.scope(cache_dir=tmp_path / "cache", cache_max_bytes=int(entry_bytes * 3.5)):
        now = time.time()
        for age, key in zip((300, 200, 100), keys):
            disk_cache.store(key, b"x" * 1000)
            os.utime(disk_cache._path(key), (now - age, now - age))
        assert disk_cache.load(keys[0]) == b"x" * 1000  # the oldest, now the most recently used
        disk_cache.store(keys[3], b"x" * 1000)  # a fourth passes the cap
        assert [disk_cache._path(key).exists() for key in keys] == [True, False, True, True]


def test_stores_under_the_cap_do_not_walk_the_cache(tmp_path, monkeypatch):
    walks = []
    tidy = disk_cache._tidy
    monkeypatch.setattr(disk_cache, "_tidy", lambda root, cap: walks.append(root) or tidy(root, cap))
    with config.scope(cache_dir=tmp_path):
        for i in range(20):
            disk_cache.store(f"{i:02x}" * 32, b"x" * 100)
    assert walks == [tmp_path]  # the first store of the process sizes the cache; the rest add to it


def test_temporary_files_of_a_killed_writer_are_removed_after_an_hour(tmp_path):
    shard = tmp_path / KEY[:2]
    shard.mkdir(mode=0o700)
    stale, fresh = shard / f"{KEY}.1.dead.tmp", shard / f"{KEY}.2.live.tmp"
    stale.write_bytes(b"half"), fresh.write_bytes(b"being written")
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    with config.scope(cache_dir=tmp_path):
        disk_cache.store(OTHER_KEY, b"payload")
    assert not stale.exists() and fresh.exists()


def test_the_test_run_has_a_cache_of_its_own_which_subprocesses_inherit():
    folder = Path(os.environ["BRAZE_CACHE_DIR"])
    assert config.current.cache_dir == folder and folder.name.startswith("braze-test-cache-")
    assert not folder.is_relative_to(Path.home() / ".cache")
    seen = subprocess.run([sys.executable, "-c", "from braze import config; print(config.current.cache_dir)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert seen == str(folder)


def test_a_size_cap_is_read_from_the_environment():
    assert config.Config.from_environment({}).cache_max_bytes == 1 << 30
    assert config.Config.from_environment({"BRAZE_CACHE_MAX_BYTES": "512M"}).cache_max_bytes == 512 << 20
    assert config.Config.from_environment({"BRAZE_CACHE_MAX_BYTES": "4096"}).cache_max_bytes == 4096
    with pytest.raises(config.InputError, match="BRAZE_CACHE_MAX_BYTES: expected a number of bytes .* got 'lots'"):
        config.Config.from_environment({"BRAZE_CACHE_MAX_BYTES": "lots"})


def test_numbers_stay_right_through_a_validated_disk_cache_hit(tmp_path):
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    with config.scope(cache_dir=tmp_path):
        for compiles in (["hit"], []):  # compiled, then loaded from the disk
            engine.forget_compiled_kernels()
            with Fusion(name="hit") as f:
                f.add_output(f.define_tensor((-1,)) * 3.0)
            with record() as rec:
                (out,) = f.execute([x])
            assert rec.compiles == compiles
            np.testing.assert_allclose(out, x.astype(np.float64) * 3.0, rtol=1e-6)


def test_a_cache_root_may_be_the_users_own_link_but_not_another_users(tmp_path):
    (real := tmp_path / "real").mkdir(mode=0o700)
    (mine := tmp_path / "mine").symlink_to(real)
    with config.scope(cache_dir=mine):
        disk_cache.store(KEY, b"payload")
        assert disk_cache.load(KEY) == b"payload"
    if os.geteuid() != 0:
        return  # only root can give a link to another user
    (theirs := tmp_path / "theirs").symlink_to(real)
    os.lchown(theirs, os.geteuid() + 1, -1)
    with config.scope(cache_dir=theirs), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert disk_cache.load(KEY) is None
    (message,) = _cache_warnings(caught)
    assert f"{theirs} is a link owned by uid {os.geteuid() + 1}" in message


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC is not installed")
def test_a_cached_cubin_passes_its_check_and_a_swapped_one_does_not(tmp_path):
    from braze.compile.cuda_kernel import CudaCompiledKernel

    def compiled(name: str) -> CudaCompiledKernel:
        with Fusion(name=name) as f:
            f.add_output(f.define_tensor((-1,)) * 2.0)
        _, kernel, _ = engine.plan_kernel(f, (((True,),), "int32"), views_on_host=False)
        return CudaCompiledKernel(kernel, CompileParams(arch="sm_90"))

    with config.scope(cache_dir=tmp_path):
        first, other = compiled("cubin_a").compile(), compiled("cubin_b").compile()
        assert compiled("cubin_a").compile().from_disk  # a real cubin defines the kernels it is loaded for
        disk_cache.store(first.cache_key, other.binary)  # the right key over another kernel's cubin
        assert not compiled("cubin_a").compile().from_disk
