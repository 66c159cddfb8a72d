"""A stand-in for the driver's cuLaunchKernel: a callback with its C signature that records every
call, so native launch code is checked without a GPU."""

from __future__ import annotations

import ctypes

CU_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_void_p)


class FakeDriver:
    """Records launches; answers `fail_at`'s launch with `code`."""

    def __init__(self, fail_at: int | None = None, code: int = 0) -> None:
        self.calls: list[tuple] = []
        self.fail_at, self.code = fail_at, code
        self.callback = CU_LAUNCH(self.launch)
        self.address = ctypes.cast(self.callback, ctypes.c_void_p).value

    def launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        self.calls.append((function, gx, gy, gz, bx, by, bz, shared, stream, params, extra))
        return self.code if len(self.calls) - 1 == self.fail_at else 0
