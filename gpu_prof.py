import sys, time, torch
sys.path.insert(0, "benchmarks")
import torch_models as tm
from torch.profiler import profile, ProfilerActivity
backend = sys.argv[1]
w = {x.name: x for x in tm.workloads(False)}["gpt2_small_lm"]
torch._dynamo.reset()
model, inputs = w.build()
dev = torch.device("cuda")
model, inputs = model.to(dev), tuple(t.to(dev) for t in inputs)
run = tm.compiled(model, backend)
def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = tm._loss_of(run, inputs)
    loss.backward()
t = time.perf_counter(); step(); torch.cuda.synchronize(); print(backend, "cold", round(time.perf_counter() - t, 1))
for _ in range(3): step()
torch.cuda.synchronize()
t = time.perf_counter(); step(); torch.cuda.synchronize(); print("step wall ms", (time.perf_counter() - t) * 1e3)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    step(); torch.cuda.synchronize()
ev = [e for e in prof.key_averages() if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0) > 0]
tot = sum(e.self_device_time_total for e in prof.key_averages())
print("total device ms", tot / 1e3)
for e in sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)[:28]:
    print(f"{e.self_device_time_total/1e3:8.3f} ms {e.count:5d}  {e.key[:110]}")

import re, collections
groups = collections.Counter(); counts = collections.Counter()
for e in prof.key_averages():
    if e.device_type.name != "CUDA":
        continue
    k = e.key
    g = ("braze" if re.match(r"torch_(fwd|bwd)", k) else "triton" if k.startswith("triton_") else
         "matmul" if re.search(r"gemm|nvjet|cutlass|sm90_xmma", k) else "attention" if re.search(r"sdpa|flash|attention", k)
         else "memcpy" if "Memcpy" in k or "Memset" in k else "other")
    groups[g] += e.self_device_time_total; counts[g] += e.count
for g, t in groups.most_common():
    print(f"GROUP {g:10s} {t/1e3:8.3f} ms {counts[g]:5d} launches")
for e in sorted([e for e in prof.key_averages() if e.device_type.name == "CUDA" and not re.search(r"gemm|nvjet|cutlass|sdpa|flash", e.key)], key=lambda e: -e.self_device_time_total)[:40]:
    print(f"K {e.self_device_time_total/1e3:8.3f} ms {e.count:5d}  {e.key[:100]}")
