"""The device backends of the runtime: how a compiled kernel is launched on the CPU and on a GPU."""
