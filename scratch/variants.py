"""Times textual variants of braze's generated softmax / layer_norm kernels (experiment)."""
import re, statistics, sys, torch
sys.path.insert(0, "benchmarks")
import braze as bz
from braze import engine
from braze.runtime import cuda_driver as cuda, nvrtc
from gpu import workloads

def kernel_ms(fusion, inputs, reps=10):
    t = []
    for _ in range(reps):
        with bz.record(profile=True) as rec:
            fusion.execute(inputs)
        t.append(sum(l.device_ms for l in rec.launches))
    return statistics.median(t)

VARIANTS = {
    "base": lambda s: s,
    "int32": lambda s: re.sub(r"for \(long long (\w+) = 0LL \+ lane", r"for (int \1 = 0 + lane", s).replace("const long long p1 = active ? row : task_end - 1;", "const int p1 = active ? (int)row : (int)(task_end - 1);").replace("long long i2 = p1;", "int i2 = p1;"),
    "unroll8": lambda s: s.replace("#pragma unroll 4", "#pragma unroll 8"),
    "nounroll": lambda s: s.replace("#pragma unroll 4", ""),
}
for name, fusion, inputs, peer, nbytes in workloads():
    if not (name.startswith("softmax") or name.startswith("layer") or name.startswith("rms")):
        continue
    fusion.execute(inputs)
    runtime = next(iter(engine._caches[fusion].entries.values()))
    ex = runtime.executor
    base_src = ex.compiled.source
    for vname, edit in VARIANTS.items():
        for fast in (False, True):
            src = edit(base_src)
            opts = ("--use_fast_math",) if fast else ()
            cubin = nvrtc.compile_cubin(src, "v", ex.device.arch, opts)
            mod = cuda.Module(ex.device, cubin, ex.compiled.generated.functions)
            for t in ex.tasks:
                t.function = mod.functions[t.name]
                mod.allow_shared_memory(t.name, 96 * 1024)
            ex.module = mod; ex.occupancy.clear()
            ms = kernel_ms(fusion, inputs)
            print(f"{name:32} {vname:10} fast={fast!s:5} {nbytes / ms / 1e6:7.0f} GB/s")
    if name.startswith("softmax"):
        print(base_src[-2500:])
