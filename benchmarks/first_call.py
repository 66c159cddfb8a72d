"""Where the first call of a fusion goes, in a fresh process with a warm disk cache (on a GPU).

    python benchmarks/first_call.py          # cProfile of the first call, top 25 by cumulative time
    python benchmarks/first_call.py --cold   # the same with an empty cache (NVRTC compiles)

The probe is the one of benchmarks/gpu.py (`relu(a*b + 1)` on torch tensors): a first process fills
the cache, a second one is profiled. Prints the modules braze imported during the call too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

_PROBE = """
import cProfile, pstats, sys, time, torch, braze as bz
x = torch.randn(1000, device="cuda"); torch.cuda.synchronize()
before = set(sys.modules)
profiler = cProfile.Profile()
t0 = time.perf_counter()
profiler.enable()
with bz.Fusion() as f:
    a, b = f.define_tensor([-1]), f.define_tensor([-1])
    f.add_output(bz.ops.relu(a * b + 1.0))
f.execute([x, x]); torch.cuda.synchronize()
profiler.disable()
print(f"first call: {(time.perf_counter() - t0) * 1e3:.1f} ms")
print("imported during the call:", sorted(m for m in set(sys.modules) - before if "." not in m))
pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
"""


def main() -> None:
    from gpu import compile_bytecode

    compile_bytecode()
    cold = "--cold" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "BRAZE_CACHE_DIR": cache}
        if not cold:  # a first process fills the cache
            subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, check=True)
        print(subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                             check=True).stdout)


if __name__ == "__main__":
    main()
