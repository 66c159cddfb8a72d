"""Per-kernel GPU time of one GPT-2-small training step (fwd+bwd+AdamW), per backend, each in its own process."""
import os, sys, subprocess, collections
sys.path.insert(0, "benchmarks")
OUT = os.environ.get("OUT", "/tmp")
if len(sys.argv) > 1:
    import torch, torch_models as tm
    from torch.profiler import profile, ProfilerActivity
    backend = sys.argv[1]
    work = [w for w in tm.workloads(False) if w.name == "gpt2_small_lm"][0]
    dev = torch.device("cuda")
    model, inputs = work.build(); model, inputs = model.to(dev), tuple(t.to(dev) for t in inputs)
    run = tm.compiled(model, backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    def train():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = tm._loss_of(run, inputs)
        loss.backward(); opt.step()
    for _ in range(6): train()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(3): train()
        torch.cuda.synchronize()
    agg = collections.defaultdict(lambda: [0, 0.0])
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            a = agg[e.name]; a[0] += 1; a[1] += e.device_time / 3
    rows = sorted(agg.items(), key=lambda kv: -kv[1][1])
    total = sum(v[1] for v in agg.values())
    with open(f"{OUT}/train_{backend}.txt", "w") as fh:
        fh.write(f"{backend} kernel sum {total/1000:.3f} ms a step\n")
        for k, (c, t) in rows[:400]: fh.write(f"{t/1000:8.3f} ms {c//3:4d}x {k[:140]}\n")
    print(open(f"{OUT}/train_{backend}.txt").read().splitlines()[0])
else:
    for b in ("braze",):
        subprocess.run([sys.executable, __file__, b], env={**os.environ})
