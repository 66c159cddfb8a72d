"""Compilation below the runtime: the LLVM toolchain, object-file checks and the disk cache of
compiled code, shared by the kernel runtime and the host JIT."""
