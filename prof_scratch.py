import sys, torch
from braze.cli.bench.cases import selected
from braze.cli.bench.check import Prepared
from braze.cli.bench.suite import torch_inputs
for case in selected(sys.argv[1]):
    p = Prepared(case, "gpu")
    inputs = torch_inputs(torch, p.inputs)
    for _ in range(3):
        p.fusion.execute(list(inputs))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    p.fusion.execute(list(inputs))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("ran", case.name, flush=True)
