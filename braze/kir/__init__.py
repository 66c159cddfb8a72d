"""Kernel IR: kernels, tasks, statements and expressions, with a stable printer."""

from braze.kir.nodes import *  # noqa: F403
from braze.kir.printer import kernel as kernel_text
