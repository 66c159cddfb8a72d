"""SASS instructions per element of the CUDA kernels braze generates for the GPU benchmark workloads
(benchmarks/gpu.py), counted in the cubins NVRTC makes for sm_90. Needs no GPU, only NVRTC and
`cuobjdump` (or `nvdisasm`): --tool PATH or $CUOBJDUMP, on PATH, under $CUDA_HOME/bin, or from the
`nvidia-cuda-cuobjdump` wheel in this environment (it is no dependency of braze: install it in a
throw-away environment and name it). Without one it says so and exits 0.

    python benchmarks/sass_count.py [--tool PATH] [--arch sm_90] [--json FILE] [--show NAME]

For each innermost loop of a kernel (a backward branch and the code it jumps over) it counts the
instructions of the longest path through one iteration that keeps off rare paths (a division's slow
path), and the elements one iteration covers: the fewest elements
moved by any one kind of memory access in it (a 16-byte LDG of float32 moves 4). A normalization's
row runs the vectorized loops in turn, so its figure is their sum; with the row cached in shared
memory (the benchmark shapes fit), the loops that touch shared memory. `outside` counts the
instructions of the kernel outside those loops: per row and thread, amortized over the elements a
thread does per row (the row length over the lanes of a row).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import braze as bz  # noqa: E402
from braze import engine  # noqa: E402
from braze.codegen.cuda_launch import lanes_for  # noqa: E402
from braze.compile.compiled_kernel import CompileParams  # noqa: E402
from braze.compile.cuda_kernel import REGISTERS_PER_SM  # noqa: E402


# --- the workloads of benchmarks/gpu.py, on host arrays of the same row lengths -------------------------
def relu_fma():
    with bz.Fusion(name="relu_fma") as f:
        x, y, z = (f.define_tensor([-1]) for _ in range(3))
        f.add_output(bz.ops.relu(x * y + z))
    return f, [np.ones(1 << 16, np.float32)] * 3, 1


def softmax():
    with bz.Fusion(name="softmax") as f:
        f.add_output(bz.ops.softmax(f.define_tensor([-1, -1]), -1))
    return f, [np.ones((16, 8192), np.float32)], 8192


def layer_norm():
    with bz.Fusion(name="layer_norm") as f:
        x = f.define_tensor([-1, -1])
        w, b = f.define_tensor([-1]), f.define_tensor([-1])
        f.add_output(bz.ops.layer_norm(x, w, b, eps=1e-5))
    return f, [np.ones((16, 4096), np.float32), np.ones(4096, np.float32), np.ones(4096, np.float32)], 4096


def rms_norm():
    with bz.Fusion(name="rms_norm") as f:
        x = f.define_tensor([-1, -1], dtype=bz.bfloat16)
        w = f.define_tensor([-1], dtype=bz.bfloat16)
        f.add_output(bz.ops.rms_norm(x, w, eps=1e-6))
    bf16 = bz.bfloat16.numpy
    return f, [np.ones((16, 4096), bf16), np.ones(4096, bf16)], 4096


WORKLOADS = {"relu_fma": relu_fma, "softmax": softmax, "layer_norm": layer_norm, "rms_norm": rms_norm}


# --- finding the disassembler --------------------------------------------------------------------------
def find_tool(explicit: str | None) -> list[str] | None:
    """The command that prints SASS of a cubin file, or None."""
    candidates = [explicit, os.environ.get("CUOBJDUMP")]
    for name in ("cuobjdump", "nvdisasm"):
        candidates.append(shutil.which(name))
        if os.environ.get("CUDA_HOME"):
            candidates.append(str(Path(os.environ["CUDA_HOME"]) / "bin" / name))
        candidates += glob.glob(f"{sys.prefix}/lib/python3*/site-packages/nvidia/cu*/bin/{name}")
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return [path, "-sass"] if Path(path).name.startswith("cuobjdump") else [path, "-c"]
    return None


# --- parsing SASS --------------------------------------------------------------------------------------
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_FUNCTION = re.compile(r"Function\s*:\s*(\S+)|^\s*\.text\.(\S+):", re.M)


@dataclass
class Instruction:
    address: int
    text: str

    @property
    def opcode(self) -> str:
        words = self.text.split()
        return words[1] if words and words[0].startswith("@") else (words[0] if words else "")

    @property
    def predicated(self) -> bool:
        return self.text.startswith("@")

    @property
    def target(self) -> int | None:
        match = re.search(r"\b(?:BRA|BRX)\b.*?(0x[0-9a-f]+)", self.text)
        return int(match.group(1), 16) if match and self.opcode.startswith("BRA") else None


def functions(sass: str) -> dict[str, list[Instruction]]:
    found: dict[str, list[Instruction]] = {}
    current = None
    for line in sass.splitlines():
        header = _FUNCTION.search(line)
        if header:
            current = found.setdefault(header.group(1) or header.group(2), [])
            continue
        match = _LINE.search(line)
        if match and current is not None:
            current.append(Instruction(int(match.group(1), 16), match.group(2).strip()))
    return {name: [i for i in body if i.opcode != "NOP"] for name, body in found.items()}


@dataclass
class Loop:
    head: int  # index of the first instruction
    latch: int  # index of the backward branch
    instructions: list[Instruction]
    typical: int  # instructions on the typical path through one iteration (see _typical_iteration)
    elements: int  # elements one iteration covers
    shared: bool  # touches shared memory
    vector: bool  # moves more than one element per access

    @property
    def per_element(self) -> float:
        return self.typical / max(self.elements, 1)


def _typical_iteration(body: list[Instruction], start: int, latch: int) -> int:
    """Instructions on the longest path from `start` to the backward branch at `latch` that keeps off
    rare paths: a forward branch over a call (a division's slow path, or an exact fallback that
    holds one) is taken. A loop body without backward branches is a DAG: one pass in address order."""
    at = {ins.address: n for n, ins in enumerate(body)}
    best = {start: 1}
    for n in range(start, latch):
        if n not in best:
            continue
        ins = body[n]
        target = ins.target
        successors = []
        jumps = target is not None and target in at and n < at[target] <= latch
        over_call = jumps and any(i.opcode.startswith("CALL") for i in body[n + 1: at[target]])
        if jumps:
            successors.append(at[target])
        falls_through = not (ins.opcode in ("EXIT", "RET", "BRA") and not ins.predicated) and not over_call
        if falls_through:
            successors.append(n + 1)
        for m in successors:
            best[m] = max(best.get(m, 0), best[n] + 1)
    return best.get(latch, latch - start + 1)


_MEMORY = re.compile(r"^(LDG|STG|LDS|STS|LD|ST)\b")


def _elements(body: list[Instruction], itemsize: int) -> tuple[int, bool]:
    """The fewest elements any one kind of access moves in one iteration, and whether an access
    moves 8 bytes or more (the vector path: 4 elements of 2 or 4 bytes)."""
    moved: dict[str, int] = {}
    widest = 0
    for ins in body:
        kind = _MEMORY.match(ins.opcode)
        if not kind:
            continue
        bits = int(m.group(1)) if (m := re.search(r"\.(128|64|U16|16|U8|8)\b", ins.opcode.replace("U16", "16")
                                                             .replace("U8", "8"))) else 32
        elements = max(1, bits // (8 * itemsize))
        widest = max(widest, bits)
        moved[kind.group(1)] = moved.get(kind.group(1), 0) + elements
    return (min(moved.values()) if moved else 1), widest >= 64


def loops(body: list[Instruction], itemsize: int) -> list[Loop]:
    at = {ins.address: n for n, ins in enumerate(body)}
    edges = [(at[ins.target], n) for n, ins in enumerate(body) if ins.target is not None and ins.target in at
             and at[ins.target] < n]  # a branch to itself is the trap after the last EXIT
    found = []
    for head, latch in edges:
        if any(head <= h and end <= latch for h, end in edges if (h, end) != (head, latch)):
            continue  # another loop inside: not innermost
        region = body[head: latch + 1]
        elements, vector = _elements(region, itemsize)
        shared = any(ins.opcode.startswith(("LDS", "STS")) for ins in region)
        found.append(Loop(head, latch, region, _typical_iteration(body, head, latch), elements, shared, vector))
    return found


def hot_loops(found: list[Loop]) -> list[Loop]:
    """The loops a row runs through when its row cache fits: the vectorized ones, and of those the ones
    touching shared memory when any does; every loop when none is vectorized."""
    vector = [lp for lp in found if lp.vector]
    if not vector:
        return found
    shared = [lp for lp in vector if lp.shared]
    return shared or vector


# --- compiling ------------------------------------------------------------------------------------------
def cubin(fusion, inputs, arch: str) -> tuple[bytes, str]:
    from braze.compile.cuda_kernel import CudaCompiledKernel
    from braze.runtime.inputs import bind_inputs

    bound = bind_inputs(fusion, inputs)
    _, kernel, _ = engine.plan_kernel(fusion, engine.signature(fusion, bound), views_on_host=False)
    params = CompileParams(block_size=256, max_registers=min(255, REGISTERS_PER_SM // 256), arch=arch)
    compiled = CudaCompiledKernel(kernel, params, restrict=True).compile()
    return compiled.binary, compiled.generated.body


def count(name: str, tool: list[str], arch: str, show: bool = False) -> dict:
    fusion, inputs, row = WORKLOADS[name]()
    binary, source = cubin(fusion, inputs, arch)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.cubin"
        path.write_bytes(binary)
        sass = subprocess.run([*tool, str(path)], capture_output=True, text=True, check=True).stdout
    if show:
        print(source)
        print(sass)
    itemsize = inputs[0].itemsize
    result = {"workload": name, "kernels": {}}
    for function, body in functions(sass).items():
        found = loops(body, itemsize)
        hot = hot_loops(found)
        in_loops = sum(len(lp.instructions) for lp in found)
        per_thread = max(1, row // lanes_for(row, 256)) if row > 1 else 1
        outside = len(body) - in_loops
        result["kernels"][function] = {
            "instructions": len(body),
            "loops": [{"typical": lp.typical, "static": len(lp.instructions), "elements": lp.elements,
                       "per_element": round(lp.per_element, 2), "vector": lp.vector, "shared": lp.shared}
                      for lp in found],
            "loops_per_element": round(sum(lp.per_element for lp in hot), 2),
            "outside": outside,
            "outside_per_element": round(outside / per_thread, 2) if row > 1 else 0.0,
        }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", help="cuobjdump or nvdisasm to use")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--json", help="write the counts to this file")
    parser.add_argument("--show", help="print the CUDA source and SASS of this workload")
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args()
    tool = find_tool(args.tool)
    if tool is None:
        print("sass_count: no cuobjdump or nvdisasm found (pip install nvidia-cuda-cuobjdump in some "
              "environment, or pass --tool); nothing counted")
        return 0
    try:
        from braze.compile import nvrtc
        if not nvrtc.available():
            raise RuntimeError("NVRTC or the CUDA headers are missing")
    except Exception as e:  # noqa: BLE001  (no NVRTC: nothing to count)
        print(f"sass_count: cannot compile CUDA here ({e}); nothing counted")
        return 0
    results = [count(name, tool, args.arch, show=name == args.show) for name in args.workloads]
    print(f"{'workload':<12} {'kernel':<28} {'SASS':>6} {'loops/elem':>10} {'outside':>8} {'outside/elem':>12}"
          f"  loops (typical path / elements per iteration; v: 16-byte, s: shared memory)")
    for r in results:
        for function, c in r["kernels"].items():
            detail = ", ".join(f"{lp['typical']}/{lp['elements']}{'v' if lp['vector'] else ''}"
                               f"{'s' if lp['shared'] else ''}" for lp in c["loops"])
            print(f"{r['workload']:<12} {function:<28} {c['instructions']:>6} {c['loops_per_element']:>10} "
                  f"{c['outside']:>8} {c['outside_per_element']:>12}  {detail}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
