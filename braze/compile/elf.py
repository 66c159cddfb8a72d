"""A small reader of ELF objects: enough to check a disk cache entry before any code in it is
mapped (docs/architecture.md, "Runtime").

CPU kernels and host functions are cached as ELF relocatable objects for the host, CUDA kernels as
cubins (ELF executables for the CUDA machine). A payload is accepted only when it is a 64-bit
little-endian ELF file of the expected type and machine, whose section table and sections lie
inside it, and whose symbol table defines every function braze is about to look up. Reading is
pure Python over `struct`, so a malformed file can only fail a check, never reach LLVM or the
CUDA driver.
"""

from __future__ import annotations

import platform
import struct
from collections.abc import Callable, Iterable

ET_REL, ET_EXEC = 1, 2  # relocatable object (LLVM's output), executable (a cubin)
EM_CUDA = 190
# platform.machine() -> ELF e_machine of the objects LLVM emits for this host.
HOST_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21, "s390x": 22}
SHT_SYMTAB, SHT_NOBITS = 2, 8
SHN_UNDEF = 0
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
_SECTION = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr: name type flags addr offset size link info align entsize
_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym: name info other shndx value size
MAX_SECTIONS = 0xFF00  # SHN_LORESERVE: beyond it ELF uses an extended numbering braze never emits


def problem(data: bytes, file_type: int, machine: int | None, symbols: Iterable[str]) -> str | None:
    """Why `data` is not a 64-bit little-endian ELF file of `file_type` for `machine` (None: an
    unknown host, any machine) defining each of `symbols`; None when it is one."""
    if len(data) < _HEADER.size or data[:4] != b"\x7fELF":
        return "not an ELF file"
    ident, e_type, e_machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx = _HEADER.unpack_from(data)
    if ident[4] != 2 or ident[5] != 1:
        return f"ELF class {ident[4]} data {ident[5]}: expected 64-bit little-endian"
    if e_type != file_type or (machine is not None and e_machine != machine):
        return f"ELF type {e_type} machine {e_machine}: expected type {file_type} machine {machine}"
    if shentsize != _SECTION.size or not 0 < shnum < MAX_SECTIONS or shoff + shnum * shentsize > len(data) \
            or shstrndx >= shnum:
        return "section table out of bounds"
    sections = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    if any(s[1] != SHT_NOBITS and s[4] + s[5] > len(data) for s in sections):
        return "a section lies outside the file"
    defined = _defined_symbols(data, sections)
    if defined is None:
        return "malformed symbol table"
    missing = [name for name in symbols if name.encode() not in defined]
    return f"symbols {missing} are not defined" if missing else None


def _defined_symbols(data: bytes, sections: list[tuple]) -> set[bytes] | None:
    """The names of symbols defined in a section, from every symbol table; None when one is malformed."""
    defined: set[bytes] = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != SHT_SYMTAB:
            continue
        if entsize != _SYMBOL.size or link >= len(sections) or sections[link][1] == SHT_NOBITS:
            return None
        strings = data[sections[link][4]:sections[link][4] + sections[link][5]]
        for at in range(offset, offset + size - size % entsize, entsize):
            name, _, _, shndx, _, _ = _SYMBOL.unpack_from(data, at)
            end = strings.find(b"\0", name)
            if shndx != SHN_UNDEF and name < len(strings) and end >= 0:
                defined.add(strings[name:end])
    return defined


def host_object_check(symbols: Iterable[str]) -> Callable[[bytes], bool]:
    """A disk cache validator: the payload is a host object defining `symbols`."""
    names, machine = tuple(symbols), HOST_MACHINES.get(platform.machine().lower())
    return lambda data: problem(data, ET_REL, machine, names) is None


def cubin_check(symbols: Iterable[str]) -> Callable[[bytes], bool]:
    """A disk cache validator: the payload is a cubin defining the kernels `symbols`."""
    names = tuple(symbols)
    return lambda data: problem(data, ET_EXEC, EM_CUDA, names) is None
