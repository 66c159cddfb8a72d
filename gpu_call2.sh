export PYTHONPATH=$PWD BRAZE_CACHE_DIR=/tmp/bzc
timeout 200 python3 gpu_prof.py braze 2>&1 | grep -v Warning | tail -34
timeout 150 python3 gpu_prof.py inductor 2>&1 | grep -v Warning | tail -34
