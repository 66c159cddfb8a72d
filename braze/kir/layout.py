"""The argument layout (ABI) of a kernel: where each parameter's fields sit in the packed argument
block that every backend passes to a task (per array its data pointer, extents and strides; per
scalar one slot). Code generators read it to address parameters, runtimes to pack the block."""

from __future__ import annotations

from dataclasses import dataclass

from braze.kir import nodes as k


@dataclass(frozen=True)
class ArgLayout:
    """Where each parameter's fields sit in the packed argument block (in 8-byte slots)."""

    slots: dict[str, int]
    size: int

    @staticmethod
    def of(params: tuple[k.Param, ...]) -> ArgLayout:
        slots, at = {}, 0
        for p in params:
            slots[p.name] = at
            at += 1 + 2 * p.ndim if isinstance(p, k.ArrayParam) else 1
        return ArgLayout(slots, at)
