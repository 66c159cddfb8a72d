"""The disk cache of compiled kernels (DESIGN section 6).

Keys are sha256 hashes of named parts: the source, the compile params, the toolchain and a hash
of braze's own source. Entries are written atomically (a temporary file, then a rename) and
carry a checksum, so a corrupt or truncated file reads as a miss, never a crash.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path

from braze import config

_MAGIC = b"BRAZE1\n"


@functools.cache
def braze_source_hash() -> str:
    """A fingerprint of braze's own source files (each one's path, size and modification time): a
    change to braze invalidates the cache. It runs in every process before its first kernel, so
    it only stats the files (reading and hashing all of them cost 3 ms there), through scandir,
    which costs a third of os.walk and os.stat."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lines: list[str] = []
    _fingerprint_folder(root, "", lines)
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()


def _fingerprint_folder(folder: str, prefix: str, lines: list[str]) -> None:
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir():
                if entry.name != "__pycache__":
                    _fingerprint_folder(entry.path, f"{prefix}{entry.name}/", lines)
            elif entry.name.endswith((".py", ".cuh")):
                info = entry.stat()
                lines.append(f"{prefix}{entry.name}:{info.st_size}:{info.st_mtime_ns}\n")


def cache_key(**parts: object) -> str:
    """sha256 over named parts (sorted by name), so a miss can be explained part by part."""
    digest = hashlib.sha256()
    for name in sorted(parts):
        digest.update(f"{name}={parts[name]!r}\n".encode())
    return digest.hexdigest()


def enabled() -> bool:
    return "disk_cache" not in config.current.disable


def _path(key: str) -> Path:
    return config.current.cache_dir / key[:2] / f"{key}.bin"


def load(key: str) -> bytes | None:
    """The cached bytes for `key`, or None on a miss, a disabled cache or a damaged file."""
    if not enabled():
        return None
    try:
        blob = _path(key).read_bytes()
    except OSError:
        return None
    header = len(_MAGIC) + 32
    if len(blob) < header or not blob.startswith(_MAGIC):
        return None
    payload = blob[header:]
    return payload if hashlib.sha256(payload).digest() == blob[len(_MAGIC):header] else None


def store(key: str, payload: bytes) -> None:
    """Writes atomically; a read-only or full disk only costs the cache entry."""
    if not enabled():
        return
    path = _path(key)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as tmp:
            tmp.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp.name, path)
    except OSError:
        if tmp is not None:  # a failed write leaves no half-written file behind
            Path(tmp.name).unlink(missing_ok=True)


def clear() -> int:
    """Removes every cache entry, and any temporary file a killed writer left; returns how many
    entries were removed."""
    root = config.current.cache_dir
    removed = 0
    for path in root.rglob("*.bin") if root.exists() else []:
        path.unlink(missing_ok=True)
        removed += 1
    for path in root.rglob("*.tmp") if root.exists() else []:
        path.unlink(missing_ok=True)
    return removed
