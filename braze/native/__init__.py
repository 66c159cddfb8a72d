"""Native code built with llvmlite at run time: CPython builtins and shape functions (host_jit), the
native launch loop (launch_jit) and the native call on torch tensors (torch_call)."""
