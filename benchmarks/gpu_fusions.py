"""The fusions the GPU benchmarks time (benchmarks/gpu.py): no torch needed
to build them."""

import braze as bz


def relu_fma_fusion():
    with bz.Fusion(name="relu_fma") as f:
        x, y, z = (f.define_tensor([-1]) for _ in range(3))
        f.add_output(bz.ops.relu(x * y + z))
    return f


def softmax_fusion():
    with bz.Fusion(name="softmax") as f:
        f.add_output(bz.ops.softmax(f.define_tensor([-1, -1]), -1))
    return f


def layer_norm_fusion():
    with bz.Fusion(name="layer_norm") as f:
        x = f.define_tensor([-1, -1])
        w, b = f.define_tensor([-1]), f.define_tensor([-1])
        f.add_output(bz.ops.layer_norm(x, w, b, eps=1e-5))
    return f


def rms_norm_fusion():
    with bz.Fusion(name="rms_norm") as f:
        x = f.define_tensor([-1, -1], dtype=bz.bfloat16)
        w = f.define_tensor([-1], dtype=bz.bfloat16)
        f.add_output(bz.ops.rms_norm(x, w, eps=1e-6))
    return f
