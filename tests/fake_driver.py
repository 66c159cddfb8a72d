"""A stand-in for the driver's cuLaunchKernel, cuCtxGetCurrent and cuCtxSetCurrent: callbacks with
their C signatures that record every call, so native launch code is checked without a GPU."""

from __future__ import annotations

import ctypes

from braze.compile.cuda_driver import DriverCalls

CU_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_void_p)
CU_GET_CONTEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
CU_SET_CONTEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
KERNELS_CONTEXT = 0xC0  # the context the fake kernels were loaded in


class FakeDriver:
    """Records launches; answers `fail_at`'s launch with `code`. `current` is the context current
    on the (one) calling thread; each launch records the context it was made in."""

    def __init__(self, fail_at: int | None = None, code: int = 0, current: int = KERNELS_CONTEXT,
                 set_code: int = 0) -> None:
        self.calls: list[tuple] = []
        self.contexts: list[int] = []  # the current context at each launch
        self.sets: list[int] = []  # each cuCtxSetCurrent's argument
        self.fail_at, self.code, self.current, self.set_code = fail_at, code, current, set_code
        self.callbacks = (CU_LAUNCH(self.launch), CU_GET_CONTEXT(self.get_context), CU_SET_CONTEXT(self.set_context))
        self.address = ctypes.cast(self.callbacks[0], ctypes.c_void_p).value
        get, set_ = (ctypes.cast(c, ctypes.c_void_p).value for c in self.callbacks[1:])
        self.calls_for = lambda context=KERNELS_CONTEXT: DriverCalls(self.address, get, set_, context)
        self.driver = self.calls_for()

    def launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        self.calls.append((function, gx, gy, gz, bx, by, bz, shared, stream, params, extra))
        self.contexts.append(self.current)
        return self.code if len(self.calls) - 1 == self.fail_at else 0

    def get_context(self, answer) -> int:
        answer[0] = self.current
        return 0

    def set_context(self, context) -> int:
        self.sets.append(context)
        if self.set_code:
            return self.set_code
        self.current = context
        return 0
