"""Compilation in named stages, Kernel IR -> source (codegen) -> binary -> loaded module: compiled
kernels for the CPU (LLVM) and CUDA (NVRTC), compiled ahead on worker threads, the CUDA driver that
loads them, the LLVM toolchain, object-file checks and the disk cache of compiled code."""
