"""The native call on torch tensors' LLVM IR (`native/torch_call.py`), checked without torch: the
function verifies, and each struct it reads has the layout of the ctypes structure that fills it."""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm

from braze.compile import llvm_toolchain
from braze.native import torch_call


def test_the_function_is_valid_llvm() -> None:
    llvm.parse_assembly(torch_call.llvm_source()).verify()


def test_the_ir_structs_have_the_ctypes_layouts() -> None:
    target_data = llvm_toolchain.new_target_machine(opt=0).target_data
    layouts = (torch_call.Api, torch_call.TensorCheck, torch_call.OutputAllocation, torch_call.CallSpec)
    for ir_type, layout in zip(torch_call.ir_struct_types(), layouts, strict=True):
        llvm_type = llvm.parse_assembly(f"@x = external global {ir_type}").get_global_variable("x").global_value_type
        assert target_data.get_abi_size(llvm_type) == ctypes.sizeof(layout), layout.__name__
        assert [target_data.get_element_offset(llvm_type, n) for n in range(len(layout._fields_))] == \
            [getattr(layout, name).offset for name, _ in layout._fields_], layout.__name__
