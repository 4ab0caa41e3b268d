#!/bin/bash
# Issue 14, fifth session, last device call: the GPU suite and the memory-bound kernels with a
# plain row reduction taking a warp per row at any extent (launchers.WARPS_PER_SM).
export PYTHONPATH=. PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
git rev-parse HEAD > $O/gpu3_tree.txt 2>/dev/null; git status --short >> $O/gpu3_tree.txt
timeout 220 python3 -m pytest -q -m gpu -n 4 tests -p no:cacheprovider > $O/gpu3_suite.txt 2>&1
tail -3 $O/gpu3_suite.txt
timeout 100 python3 -m dlcb_lab.bench.bandwidth --backend cuda --no-inductor --out $O/bandwidth_warp.csv > $O/bandwidth_warp.txt 2>&1
grep -E "^(model|bias_relu|global_pool|layer_norm|row_layer_norm|row_softmax|softmax|to_nhwc) .*128|^ +128" $O/bandwidth_warp.txt | head -20
timeout 120 python3 data/bench/h100_stage4k/diag.py pool > $O/pool_warp.txt 2>&1
cat $O/pool_warp.txt
