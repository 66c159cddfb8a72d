"""The disk cache of compiled kernels (docs/architecture.md, "Runtime": keys, trust, atomic writes,
the size cap). It holds native code braze will run, so it is trusted exactly like the user's own
files and checked like it could have been tampered with: a folder another user owns or others can
write turns it off for that root for the rest of the process, with one warning; an entry is read
without following links or blocking, and only a regular file the user owns, of bounded size, whose
recorded key and payload digest match and whose payload the caller's validator (`braze.compile.elf`)
accepts, is a hit. The least recently used entries go first (a load touches its entry's mtime).
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from braze import config
from braze.errors import DiskCacheWarning

_MAGIC = b"BRAZE2\n"  # then the 64-character key, a newline, the payload's sha256 and the payload
_HEADER_BYTES = len(_MAGIC) + 64 + 1 + 32
MAX_ENTRY_BYTES = 256 << 20  # a larger file is a miss, refused before it is read
STALE_TEMPORARY_SECONDS = 3600  # a temporary file this old belongs to a writer that was killed
RESCAN_EVERY_STORES = 256  # stores between two walks of the cache (other processes store too)
EVICT_DOWN_TO = 0.9  # an eviction leaves this fraction of the cap, so the next store does not evict again
_HEX = frozenset("0123456789abcdef")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

_lock = threading.Lock()
_trusted: set[Path] = set()  # folders checked in this process (only their owner could change them)
_refused: dict[Path, str] = {}  # cache root -> why it was refused (warned once)
_usage: dict[Path, list[int]] = {}  # cache root -> [estimated entry bytes, stores since the last walk]


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
    return not config.disabled("disk_cache")


def _is_key(key: str) -> bool:
    return len(key) == 64 and set(key) <= _HEX


def _path(key: str) -> Path:
    return config.current.cache_dir / key[:2] / f"{key}.bin"


# --- who may write the cache ------------------------------------------------------------------------
def _current_uid() -> int:
    """The user the cache must belong to (tests stand in another one)."""
    return os.geteuid()


def folder_problem(info: os.stat_result) -> str | None:
    """Why a folder with status `info` cannot hold code braze runs; None when only the user can write it."""
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != _current_uid():
        return f"is owned by uid {info.st_uid}, not by this user (uid {_current_uid()})"
    if info.st_mode & 0o022:
        return f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _root_problem(root: Path) -> str | None:
    """Why the cache root cannot hold code braze runs. It may be a link the user made (to another
    disk), never one another user planted (in /tmp, say)."""
    link = os.lstat(root)
    if stat.S_ISLNK(link.st_mode) and link.st_uid != _current_uid():
        return f"is a link owned by uid {link.st_uid}, not by this user (uid {_current_uid()})"
    return folder_problem(os.stat(root))


def _make_folders(path: Path) -> None:
    """Creates `path` and any missing parent, each 0700 whatever the umask."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue  # made meanwhile by another process: checked below like any folder
        os.chmod(folder, 0o700)


def _refuse(root: Path, folder: Path, reason: str) -> None:
    with _lock:
        if root in _refused:
            return
        _refused[root] = f"{folder} {reason}"
    warnings.warn(f"braze: the cache folder {folder} {reason}; the disk cache is off for this process "
                  f"(make it yours with mode 700, or remove it)", DiskCacheWarning, stacklevel=4)


def _private_folder(folder: Path, create: bool) -> bool:
    """Whether `folder` (the cache root or a folder in it) exists, or was made, and only this user
    can write it and the root. A folder that fails the check turns the root off, with one warning."""
    root = config.current.cache_dir
    if root in _refused:
        return False
    if folder in _trusted:
        return True
    if folder != root and not _private_folder(root, create):
        return False
    try:
        if create:
            _make_folders(folder)
        reason = _root_problem(root) if folder == root else folder_problem(os.lstat(folder))
    except OSError:
        return False  # absent, or not creatable (a read-only home): no cache, nothing to warn about
    if reason is not None:
        _refuse(root, folder, reason)
        return False
    _trusted.add(folder)
    return True


def refusal() -> str | None:
    """Why this process does not use the cache folder (a folder and what is wrong with it), or None."""
    root = config.current.cache_dir
    if root in _refused:
        return _refused[root]
    try:
        reason = _root_problem(root)
    except OSError:
        return None  # not made yet: it will be made private
    return None if reason is None else f"{root} {reason}"


# --- entries ----------------------------------------------------------------------------------------
def load(key: str, validate: Callable[[bytes], bool] | None = None) -> bytes | None:
    """The cached payload for `key`, or None on a miss: a disabled or refused cache, an absent,
    damaged, oversized or foreign file, one recorded under another key, or a payload `validate`
    rejects (braze passes one that checks the object format and symbols: `braze.compile.elf`)."""
    if not enabled() or not _is_key(key):
        return None
    path = _path(key)
    if not _private_folder(path.parent, create=False):
        return None
    blob = _read_entry(path)
    if blob is None or len(blob) < _HEADER_BYTES or not blob.startswith(_MAGIC):
        return None
    recorded_key, digest = blob[len(_MAGIC):len(_MAGIC) + 64], blob[_HEADER_BYTES - 32:_HEADER_BYTES]
    payload = blob[_HEADER_BYTES:]
    if recorded_key != key.encode() or hashlib.sha256(payload).digest() != digest:
        return None
    return payload if validate is None or validate(payload) else None


def _read_entry(path: Path) -> bytes | None:
    """The bytes of a regular file the user owns of bounded size; None for anything else. The open
    follows no link and does not wait for a FIFO's writer; a hit marks the entry as recently used."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != _current_uid() or \
                info.st_size > _HEADER_BYTES + MAX_ENTRY_BYTES:
            return None
        chunks, left = [], info.st_size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                return None  # shrank while read: a miss
            chunks.append(chunk)
            left -= len(chunk)
        _touch(fd)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _touch(fd: int) -> None:
    """Sets the entry's mtime to now: eviction removes the least recently used first (atime is
    not kept reliably: relatime, noatime)."""
    try:
        os.utime(fd)
    except OSError:
        pass  # a read-only cache still serves hits


def store(key: str, payload: bytes) -> None:
    """Writes atomically; a read-only or full disk, or a refused folder, only costs the cache entry."""
    if not enabled() or not _is_key(key) or len(payload) > MAX_ENTRY_BYTES:
        return
    path = _path(key)
    if not _private_folder(path.parent, create=True):
        return
    blob = _MAGIC + key.encode() + b"\n" + hashlib.sha256(payload).digest() + payload
    if _write_new_file(path.with_name(f"{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"), blob, path):
        _account(len(blob))


def _write_new_file(path: Path, data: bytes, rename_to: Path | None = None) -> bool:
    """Creates `path` (0600, exclusively, never through a link), writes `data` and renames it to
    `rename_to` if given; on failure leaves no file behind."""
    try:
        fd = os.open(path, _CREATE_FLAGS, 0o600)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), 0o600)  # the umask can only have removed bits; this sets them exactly
            file.write(data)
        if rename_to is not None:
            os.replace(path, rename_to)
        return True
    except OSError:
        path.unlink(missing_ok=True)  # a failed write leaves no half-written file behind
        return False


def write_private_file(folder_name: str, file_name: str, text: str) -> Path | None:
    """Writes `text` to a new file `file_name` in the cache's folder `folder_name` (dumps, failed
    sources) and returns its path; an existing file or link there is replaced, never written
    through. None when the folder is refused or the write fails."""
    folder = config.current.cache_dir / folder_name
    if not _private_folder(folder, create=True):
        return None
    path = folder / file_name
    try:
        path.unlink(missing_ok=True)  # removes a planted link itself, never its target
    except OSError:
        return None
    return path if _write_new_file(path, text.encode()) else None


# --- size ---------------------------------------------------------------------------------------------
def _account(added: int) -> None:
    """Adds a stored entry to the root's size estimate; walks the cache (evicting and removing
    stale temporary files) on a root's first store, when the estimate passes the cap, and every
    `RESCAN_EVERY_STORES` stores, so a store does not walk the tree."""
    root, cap = config.current.cache_dir, config.current.cache_max_bytes
    with _lock:
        usage = _usage.get(root)
        if usage is not None:
            usage[0] += added
            usage[1] += 1
            if usage[0] <= cap and usage[1] < RESCAN_EVERY_STORES:
                return
        _usage[root] = [_tidy(root, cap), 0]


def _files(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Entries and temporary files in the root's two-hex-digit folders, without following links."""
    try:
        folders = [e.path for e in os.scandir(root) if len(e.name) == 2 and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for folder in folders:
        try:
            with os.scandir(folder) as entries:
                found = [(Path(e.path), e.stat(follow_symlinks=False)) for e in entries
                         if e.name.endswith((".bin", ".tmp")) and e.is_file(follow_symlinks=False)]
        except OSError:
            continue
        yield from found


def _tidy(root: Path, cap: int) -> int:
    """Removes temporary files older than an hour, then the least recently used entries while they
    take more than `cap` bytes (down to `EVICT_DOWN_TO` of it); returns the bytes left."""
    entries, now = [], time.time()
    for path, info in _files(root):
        if path.suffix == ".bin":
            entries.append((info.st_mtime_ns, info.st_size, path))
        elif now - info.st_mtime > STALE_TEMPORARY_SECONDS:
            path.unlink(missing_ok=True)
    total = sum(size for _, size, _ in entries)
    if total > cap:
        for _, size, path in sorted(entries):
            if total <= cap * EVICT_DOWN_TO:
                break
            path.unlink(missing_ok=True)
            total -= size
    return total


def usage() -> tuple[int, int]:
    """The number of entries in the cache folder and their bytes."""
    sizes = [info.st_size for path, info in _files(config.current.cache_dir) if path.suffix == ".bin"]
    return len(sizes), sum(sizes)


def clear() -> int:
    """Removes every cache entry, and any temporary file a killed writer left; returns how many
    entries were removed."""
    root = config.current.cache_dir
    removed = 0
    for path, _ in _files(root):
        path.unlink(missing_ok=True)
        if path.suffix == ".bin":
            removed += 1
    with _lock:
        _usage.pop(root, None)
    return removed
