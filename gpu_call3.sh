export PYTHONPATH=$PWD BRAZE_CACHE_DIR=/tmp/bzc
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 250 python3 -m pytest -q -n 8 -p no:cacheprovider tests/cuda/test_inner_outer_gpu.py tests/cuda/test_dense_reductions_gpu.py tests/cuda/test_narrow_math_gpu.py tests/cuda/test_reductions_gpu.py tests/cuda/test_masked_softmax_gpu.py tests/cuda/test_norms_gpu.py $EXTRA_TESTS 2>&1 | tail -8
C=rms_norm_backward,layer_norm_backward,full_sum,grad_norm,swiglu,scaled_masked_softmax,softmax_bf16,bias_gelu,$EXTRA_CASES
timeout 330 python3 benchmarks/suite.py --no-jax --repeats 10 --cases $C --out $OUT/new.json 2>&1 | tail -16
B="python3 benchmarks/suite.py --braze-only --repeats 10"
for d in inner_outer_split inner_outer_registers inner_outer_occupancy inner_outer_fold inner_outer_split,inner_outer_registers,inner_outer_occupancy,inner_outer_fold; do
  echo "== disable $d"; BRAZE_DISABLE=$d timeout 60 $B --cases rms_norm_backward,layer_norm_backward --out $OUT/d.json 2>&1 | grep -E "backward" | tail -2; done
echo "== disable dense_reductions"; BRAZE_DISABLE=dense_reductions timeout 60 $B --cases full_sum,grad_norm --out $OUT/d.json 2>&1 | grep -E "sum|norm" | tail -2
echo "== disable narrow_math"; BRAZE_DISABLE=narrow_math timeout 60 $B --cases scaled_masked_softmax,softmax_bf16 --out $OUT/d.json 2>&1 | grep -E "softmax" | tail -2
echo "== disable fast_divisors,uniform_alignment"; BRAZE_DISABLE=fast_divisors,uniform_alignment timeout 80 $B --cases rope,batch_norm,group_norm,add_transpose,scaled_masked_softmax --out $OUT/d.json 2>&1 | grep -E "RoPE|norm|softmax|y.T" | tail -5
