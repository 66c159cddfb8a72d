"""Generated CUDA C++ as a `str`: printing it shows the code; what else the generator found rides along."""

from __future__ import annotations

import dataclasses


class CudaSourceText(str):
    """The generated kernels (one `__global__` per task), as text: printing `step.cuda_source(x)` shows them.

    The string is the generated code without the prelude, as `BRAZE_DUMP=cuda_kernel` prints it;
    `.text` is the whole translation unit NVRTC compiles (the prelude first). Every field of the
    generator's result is an attribute as well: `.body`, `.functions` (task i's `__global__` name;
    for fusions, then the tasks' functions for one warp a row) and, for fusions, `.lane_plans`,
    `.row_caches`, `.grid_reductions`, `.register_rows` and `.warp_functions`.
    """

    text: str
    body: str
    functions: tuple[str, ...]

    def __new__(cls, generated: object) -> CudaSourceText:
        self = super().__new__(cls, generated.body)
        for field in dataclasses.fields(generated):
            setattr(self, field.name, getattr(generated, field.name))
        self.text = generated.text
        return self
