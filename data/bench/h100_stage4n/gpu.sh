#!/bin/bash
# Issue 14, eighth session: squeezenet1_1's dynamic against static compile at batch 1 / 8 / 32
# (the seventh session's batch-1 ratio, 1.283, was a lone outlier), per kernel.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
O=${OUT:-/tmp/out}
git rev-parse HEAD > $O/tree.txt 2>/dev/null; git status --short >> $O/tree.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $O/tree.txt
timeout 400 python3 data/bench/h100_stage4l/diag.py dynstatic squeezenet1_1 1,8,32 > $O/dynstatic.txt 2>&1
grep -E "batch|device us per call" $O/dynstatic.txt
