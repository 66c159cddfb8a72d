"""A builtin made over a native function holds its method definition: CPython reads it through a
raw pointer on every call, and threads racing on `fastcall_method`'s first call each build a
definition of their own, of which only one is cached."""

from __future__ import annotations

import ctypes
import gc
import weakref

import pytest

from braze.host.shapes import ShapeProgram, infer_layout
from braze.ir import TensorView
from braze.native import host_jit

pytestmark = pytest.mark.skipif(not host_jit.builtins_available(), reason="native builtins are not made here")


def test_a_builtin_keeps_a_method_definition_no_cache_holds() -> None:
    import braze as bz

    f = bz.Fusion()
    t: TensorView = f.define_tensor((-1, -1))
    program = ShapeProgram.of("lifetime", infer_layout(t).values)
    native = host_jit.NativeShapeFunction(program)  # its spec, and the cached definition
    cached = host_jit.fastcall_method(host_jit.SHAPE_CALL, host_jit.shape_call_source)
    own = host_jit.MethodDef(cached.name, cached.method, cached.flags, None)  # as a racing thread builds its own
    builtin = host_jit.new_builtin(own, ctypes.addressof(native._spec), native)
    definition = weakref.ref(own)
    del own
    gc.collect()
    assert definition() is not None
    assert builtin(3, 5) == native([3, 5])
