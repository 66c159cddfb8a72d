set -x
export PYTHONPATH=$PWD BRAZE_CACHE_DIR=/tmp/bzc
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 -m pytest -q -p no:cacheprovider -x tests/cuda/test_narrow_math_gpu.py 2>&1 | tail -3
timeout 200 python3 benchmarks/suite.py --no-jax --repeats 10 --cases swiglu,bias_gelu,gelu_backward,softmax_bf16 --out $OUT/narrow.json 2>&1 | tail -9
BRAZE_DISABLE=narrow_math timeout 100 python3 benchmarks/suite.py --braze-only --repeats 10 --cases swiglu,bias_gelu --out $OUT/exact.json 2>&1 | tail -5
timeout 330 python3 benchmarks/torch_models.py --models gpt2_small_lm --out $OUT/gpt2small.json 2>&1 | tail -25
