"""Runtime: array interop, input binding, the reference backend and random state."""
