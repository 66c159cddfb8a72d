"""Frontends: the Fusion builder and `@jit` tracing."""

from braze.frontend.fusion import Fusion
from braze.frontend.jit import JitFunction, jit

__all__ = ["Fusion", "JitFunction", "jit"]
