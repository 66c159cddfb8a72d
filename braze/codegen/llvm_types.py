"""How each braze dtype lives in an LLVM register and in memory (bfloat16 travels as raw bits).

Shared by the LLVM code generator (`llvm`) and its op rules (`llvm_rules`), which both build
values of these types.
"""

from __future__ import annotations

from llvmlite import ir

from braze.dtypes import DType

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
VOID = ir.VoidType()

REGISTER_TYPE = {"bool": I1, "int8": I8, "int16": I16, "int32": I32, "int64": I64, "uint8": I8, "uint16": I16,
                 "uint32": I32, "uint64": I64, "float16": F16, "bfloat16": I16,
                 "float32": F32, "float64": F64}
MEMORY_TYPE = {**REGISTER_TYPE, "bool": I8}


def register_type(dtype: DType) -> ir.Type:
    return REGISTER_TYPE[dtype.name]
