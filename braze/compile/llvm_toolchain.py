"""The LLVM toolchain of the CPU backend and the host JIT: LLVM IR to native code with llvmlite,
and object code loaded into the process (`runtime/thread_pool.py` runs the task functions)."""

from __future__ import annotations

import ctypes
import functools
import threading

import llvmlite
import llvmlite.binding as llvm

from braze.errors import CompileError

TASK_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
# Held by everything that drives LLVM, its target queries included: its global state is not
# thread-safe. Reentrant, since compiling asks for the target machine under it.
_lock = threading.RLock()
LLVM_LOCK = _lock


# AVX-512 CPUs whose clock drops when 512-bit vectors run: LLVM's 256-bit preference stays for them.
_THROTTLING_AVX512 = frozenset({"skylake-avx512", "cascadelake", "cooperlake", "cannonlake"})


def host_features() -> str:
    """The host's CPU features, plus full-width vectors where the CPU has AVX-512 and runs it at
    speed (LLVM prefers 256-bit vectors on every AVX-512 CPU; 512-bit ones run the inline math's
    loops about 1.2x faster on recent Xeons)."""
    with _lock:
        return _host_features()


@functools.cache
def _host_features() -> str:
    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features().flatten()
    if "+avx512f" in features.split(",") and llvm.get_host_cpu_name() not in _THROTTLING_AVX512:
        features += ",-prefer-256-bit"
    return features


def new_target_machine(opt: int = 3) -> llvm.TargetMachine:
    """A target machine for the host (all its CPU features), generating code at optimization level `opt`."""
    with _lock:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple()
        return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=host_features(),
                                            opt=opt, reloc="default", codemodel="jitdefault", jit=True)


def target_machine(opt: int = 3) -> llvm.TargetMachine:
    """The host's target machine for emitting code at optimization level `opt`, created once per
    level (never give it to an engine, which would own and free it)."""
    with _lock:
        return _shared_target_machine(opt)


@functools.cache
def _shared_target_machine(opt: int) -> llvm.TargetMachine:
    return new_target_machine(opt)


@functools.cache
def toolchain_id() -> str:
    """What the compiled code depends on besides its source: for the disk cache key."""
    with _lock:
        return f"llvmlite {llvmlite.__version__} llvm {llvm.llvm_version_info} {llvm.get_process_triple()} " \
               f"{llvm.get_host_cpu_name()} {host_features()}"


def parse(ir_text: str, what: str, tm: llvm.TargetMachine) -> llvm.ModuleRef:
    """Parses and verifies a module for this process and `tm`'s data layout (`what` names it in
    the error)."""
    try:
        module = llvm.parse_assembly(ir_text)
        module.verify()
    except RuntimeError as error:
        raise CompileError(f"{what}: LLVM rejected the generated IR:\n{error}") from None
    module.triple = llvm.get_process_triple()
    module.data_layout = str(tm.target_data)
    return module


def optimize(ir_text: str, name: str) -> llvm.ModuleRef:
    """Parses, verifies and optimizes (O3 with loop and SLP vectorization) a module."""
    tm = target_machine()
    module = parse(ir_text, f"kernel {name!r}", tm)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    builder = llvm.create_pass_builder(tm, tuning)
    builder.getModulePassManager().run(module, builder)
    return module


def compile_object(ir_text: str, name: str) -> tuple[bytes, str]:
    """Native object code for the module, and the optimized IR (for `BRAZE_DUMP=llvm_ir`)."""
    with _lock:  # LLVM's global state is not safe to drive from several threads at once
        module = optimize(ir_text, name)
        return target_machine().emit_object(module), str(module)


def new_engine(opt: int = 3) -> llvm.ExecutionEngine:
    """An empty JIT engine for this process. An engine owns its target machine and deletes it when
    freed: it gets one of its own, or freeing it would leave a shared one dangling."""
    with _lock:
        backing = llvm.parse_assembly("")
        backing.triple = llvm.get_process_triple()
        return llvm.create_mcjit_compiler(backing, new_target_machine(opt))


class LoadedObject:
    """Object code loaded into the process; holds the JIT engine alive while functions are in use."""

    def __init__(self, obj: bytes, symbols: list[str]) -> None:
        with _lock:
            self.engine = new_engine()
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()
            self.functions = {s: TASK_SIGNATURE(self.engine.get_function_address(s)) for s in symbols}
        missing = [s for s, f in self.functions.items() if not ctypes.cast(f, ctypes.c_void_p).value]
        if missing:
            raise CompileError(f"compiled object lacks functions {missing}")

    def __del__(self) -> None:
        # Freed with the last kernel using it, on whichever thread drops it (or the collector's):
        # disposing an engine drives LLVM too, so it waits for the lock like every other LLVM call.
        engine = self.__dict__.pop("engine", None)
        if engine is not None:
            with _lock:
                engine.close()
