#!/bin/bash
# gpu.sh cut to what the session's device time left: the GPU suite and squeezenet1_1 dynamic
# against static per kernel at batch 32.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
O=${OUT:-/tmp/out}
git rev-parse HEAD > $O/tree.txt 2>/dev/null; git status --short >> $O/tree.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $O/tree.txt
timeout 190 python3 -m pytest -q -m gpu -n 4 tests -p no:cacheprovider > $O/suite.txt 2>&1
tail -3 $O/suite.txt
timeout 60 python3 data/bench/h100_stage4l/diag.py dynstatic squeezenet1_1 32 > $O/dynstatic.txt 2>&1
grep -E "batch [0-9]+: |device us per call" $O/dynstatic.txt
