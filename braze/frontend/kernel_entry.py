"""One compiled signature of a `@bz.kernel`, for the CPU calls (`kernel`) and the GPU calls
(`kernel_gpu`) alike."""

from __future__ import annotations

from dataclasses import dataclass

from braze.passes.fuse_tasks import Decision
from braze.runtime.kernel_launch import KernelLauncher
from braze.runtime.kernel_launch_cuda import CudaKernelLauncher


@dataclass
class KernelEntry:
    """One compiled signature: the launcher and what task fusion decided."""

    launcher: KernelLauncher | CudaKernelLauncher
    decisions: list[Decision]
    written: tuple[int, ...]  # positions of the array arguments the kernel writes
