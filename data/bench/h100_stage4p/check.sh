#!/bin/bash
# For the next device call: the GPU check of this session's kernel-facing change (ceil-mode
# pools over an input shorter than the window: the avg count's (o + 1) // (full + 2) with a
# possibly negative full, emitted as a floor division) and of the ninth session's clamped max
# windows: the GPU suite, then memcheck over the sanitizer workload (squeezenet1_1's dynamic
# ceil-mode pools at small H, W among it). Then the sweep's systems left:
#   SYS=eager-cudagraph,torch.compile-static,torch.compile-dynamic T=540 bash sweep.sh  (x2-3)
export PYTHONUNBUFFERED=1 PYTHONPATH=.
O=${OUT:-/tmp/out}
git rev-parse HEAD > $O/tree.txt 2>/dev/null; git status --short >> $O/tree.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $O/tree.txt
timeout 190 python3 -m pytest -q -m gpu -n 4 tests -p no:cacheprovider > $O/suite.txt 2>&1
tail -3 $O/suite.txt
OUT=$O/sanitize LIMIT=90 .ci/gpu_sanitize memcheck > $O/sanitize.txt 2>&1
tail -15 $O/sanitize.txt
