export PYTHONPATH=$PWD BRAZE_CACHE_DIR=/tmp/bzc
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider tests/cuda/test_pad_matmuls_gpu.py tests/cuda/test_torch_backend_gpu.py 2>&1 | tail -4
timeout 240 python3 benchmarks/torch_models.py --models gpt2_small_lm --out $OUT/gpt2small.json 2>&1 | tail -6
BRAZE_DISABLE=pad_mm timeout 100 python3 benchmarks/torch_models.py --models gpt2_small_lm --backends braze --out $OUT/gpt2small-nopad.json 2>&1 | tail -3
B="python3 benchmarks/suite.py --braze-only --repeats 10 --cases rope,batch_norm,group_norm,scaled_masked_softmax"
for d in none fast_divisors uniform_alignment fast_divisors,uniform_alignment; do
  echo "== disable $d"; BRAZE_DISABLE=$([ $d = none ] || echo $d) timeout 60 $B --out $OUT/d.json 2>&1 | grep -E "RoPE|norm|softmax" | tail -4; done
