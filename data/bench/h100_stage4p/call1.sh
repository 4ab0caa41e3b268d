#!/bin/bash
# The sweep's second machine, first call: the three image models left, then capture's profile
# on CUDA and on the CPU in the same machine (mobilenet_v3_large: the slowest capture of
# sweep_a), to tell the device's CPU from tracing on CUDA.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
O=${OUT:-/tmp/out}
MODELS=squeezenet1_1,convnext_tiny,vit_b_16 T=${T:-420} bash data/bench/h100_stage4p/sweep.sh
for d in cuda cpu; do
  timeout 45 python3 data/bench/h100_stage4o/capture.py mobilenet_v3_large $d > $O/capture_$d.txt 2>&1
  grep -E "capture [01]|^import" $O/capture_$d.txt
done
python3 -c "import torch, time; t=time.perf_counter(); s=sum(i*i for i in range(10**7)); print(f'python loop 1e7: {time.perf_counter()-t:.2f} s')"
