"""Gathers written as indexing on a GPU, against torch.compile and eager torch in the same run: an
embedding's lookup `table[ids]` and a permutation of columns `x[:, perm]`, each checked equal to eager
first. CUDA events around one call after three warm-up calls, median of 20 (microseconds):
`python benchmarks/gathers_gpu.py`."""

import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F  # noqa: N812

import braze as bz


def median_us(fn: Callable, *args: torch.Tensor, repeats: int = 20) -> float:
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def row(name: str, program: Callable, eager: Callable, *args: torch.Tensor) -> tuple:
    fused = bz.jit(program)
    if not torch.equal(fused(*args), eager(*args)):
        raise AssertionError(f"{name}: braze's result differs from eager's")
    return name, median_us(fused, *args), median_us(torch.compile(eager), *args), median_us(eager, *args)


def main() -> None:
    generator = torch.Generator(device="cuda").manual_seed(0)
    table = torch.randn(50257, 768, device="cuda", generator=generator)
    ids = torch.randint(0, 50257, (8, 1024), device="cuda", generator=generator)
    x = torch.randn(4096, 1024, device="cuda", generator=generator)
    perm = torch.randperm(1024, device="cuda")
    rows = [
        row("table[ids] * 2, 50257x768, 8x1024 ids", lambda w, i: w[i] * 2.0, lambda w, i: F.embedding(i, w) * 2.0,
            table, ids),
        row("x[:, perm] + 1, 4096x1024", lambda x, p: x[:, p] + 1.0, lambda x, p: x[:, p] + 1.0, x, perm),
    ]
    print(f"{'gather':40} {'braze us':>9} {'torch.compile us':>17} {'eager us':>9}")
    for name, braze_us, compiled_us, eager_us in rows:
        print(f"{name:40} {braze_us:9.1f} {compiled_us:17.1f} {eager_us:9.1f}")


if __name__ == "__main__":
    main()
