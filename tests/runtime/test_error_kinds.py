"""Every error braze raises is a `bz.Error` naming the argument, the expected and the actual."""

from __future__ import annotations

import numpy as np
import pytest

import braze as bz
from braze.compile import llvm_toolchain


def test_llvm_failures_raise_the_one_compile_error() -> None:
    assert llvm_toolchain.CompileError is bz.CompileError
    with pytest.raises(bz.CompileError, match="^kernel 'broken': LLVM rejected the generated IR"):
        llvm_toolchain.optimize("define void @broken() {\n  ret i32 0\n}\n", "broken")


def _huge_output(elements: int) -> bz.Fusion:
    with bz.Fusion("huge") as f:
        x = f.define_tensor((1,), name="x")
        f.add_output(x * 2.0)  # a small output first: the huge one is output 1
        f.add_output(bz.ops.expand(x, (elements,)) + 1.0)
    return f


def test_an_output_too_big_for_memory_raises_out_of_memory_naming_it_and_its_bytes() -> None:
    elements = 1 << 46  # 256 TiB of float32: more than a process's address space, however memory is overcommitted
    f = _huge_output(elements)
    with pytest.raises(bz.OutOfMemoryError, match=rf"^output 1 \(T\d+\): expected {elements * 4} bytes of host "
                                                  rf"memory for float32\[{elements}\], got none") as caught:
        f.execute([np.ones(1, np.float32)])
    assert isinstance(caught.value, MemoryError) and isinstance(caught.value, bz.Error)


def test_out_of_memory_on_a_prepared_calls_buffer_names_it_too() -> None:
    from braze.host.program import host_buffer

    with pytest.raises(bz.OutOfMemoryError, match=rf"^intermediate T7: expected {1 << 48} bytes"):
        host_buffer(np.dtype(np.float32), 1 << 46, [1 << 46], [1], name="intermediate T7")
