"""Runtime: the CPU and CUDA backends, executors and prepared calls, array interop, input binding,
`bz.graph()`, the reference backend and random state."""
