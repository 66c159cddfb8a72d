"""Profile the cold step of GPT-2-small under the braze backend: cProfile (main thread) and a
sampler over all threads (inclusive counts per function)."""
import collections, cProfile, io, os, pstats, sys, threading, time
sys.path.insert(0, "benchmarks")
import torch
import torch_models as tm
from braze.frontend.torch import backend as _b  # noqa
OUT = os.environ.get("OUT", "/tmp")
work = [w for w in tm.workloads(False) if w.name == "gpt2_small_lm"][0]
dev = torch.device("cuda")
torch._dynamo.reset()
model, inputs = work.build()
model, inputs = model.to(dev), tuple(t.to(dev) for t in inputs)
run = tm.compiled(model, "braze")
incl = collections.Counter(); leaf = collections.Counter(); samples = [0]
stop = threading.Event()
def sampler():
    me = threading.get_ident()
    while not stop.is_set():
        for tid, frame in sys._current_frames().items():
            if tid == me: continue
            seen = set(); f = frame; first = None
            while f is not None:
                co = f.f_code
                key = f"{os.path.basename(co.co_filename)}:{co.co_name}"
                if first is None and ("braze" in co.co_filename or "torch" in co.co_filename):
                    first = key
                seen.add(key); f = f.f_back
            if first and not any(k.startswith("threading.py:wait") for k in [first]):
                leaf[first] += 1
            for k in seen: incl[k] += 1
            samples[0] += 1
        time.sleep(0.004)
t = threading.Thread(target=sampler, daemon=True); t.start()
prof = cProfile.Profile()
with tm._cold_caches():
    start = time.perf_counter()
    prof.enable()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = tm._loss_of(run, inputs)
    loss.backward(); torch.cuda.synchronize()
    prof.disable()
    cold = time.perf_counter() - start
stop.set(); t.join()
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(120)
open(f"{OUT}/cprofile.txt", "w").write(f"cold {cold:.2f}s\n" + s.getvalue())
with open(f"{OUT}/sampler.txt", "w") as fh:
    fh.write(f"cold {cold:.2f}s samples {samples[0]}\n## inclusive\n")
    for k, v in incl.most_common(150): fh.write(f"{v:7d} {k}\n")
    fh.write("## leaf (first braze/torch frame)\n")
    for k, v in leaf.most_common(80): fh.write(f"{v:7d} {k}\n")
prof.dump_stats(f"{OUT}/cold.prof")
print(f"cold {cold:.2f}s")
