#!/bin/bash
# Issue 14, fifth session, first device call: the GPU suite, the batch-32 peak, the
# memory-bound kernels, and eager + DLCB dynamic on the two ResNets that set the memory figure.
export PYTHONPATH=. PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/gpu.txt
git rev-parse HEAD >> $O/gpu.txt 2>/dev/null
timeout 200 python3 -m pytest -q -m gpu -n 4 tests -p no:cacheprovider > $O/gpu_suite.txt 2>&1
tail -3 $O/gpu_suite.txt
timeout 100 python3 data/bench/h200_stage4j/diag.py peak resnet50,wide_resnet50_2 > $O/peak.txt 2>&1
tail -3 $O/peak.txt
timeout 100 python3 -m dlcb_lab.bench.bandwidth --backend cuda --no-inductor --out $O/bandwidth.csv > $O/bandwidth.txt 2>&1
tail -3 $O/bandwidth.txt
timeout 170 python3 -m dlcb_lab.cli bench --models resnet50,wide_resnet50_2 --systems eager,dlcb-dynamic \
  --paired --reps 20 --warmup 3 --timeout 80 --out $O/mem > $O/mem.txt 2>&1
tail -15 $O/mem.txt
