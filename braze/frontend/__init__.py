"""Frontends: the Fusion builder, `@jit` tracing and the `@kernel` loop language."""

from braze.frontend.fusion import Fusion
from braze.frontend.jit import JitFunction, jit
from braze.frontend.kernel import KernelFunction, kernel
from braze.frontend.kernel_lang import (
    Array,
    atomic_add,
    atomic_max,
    atomic_min,
    atomic_sub,
    func,
    math,
    ndrange,
    static,
)
from braze.frontend.kernel_random import random

__all__ = ["Array", "Fusion", "JitFunction", "KernelFunction", "atomic_add", "atomic_max", "atomic_min", "atomic_sub",
           "func", "jit", "kernel", "math", "ndrange", "random", "static"]
