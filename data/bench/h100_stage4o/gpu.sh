#!/bin/bash
# Issue 14, ninth session: a max window's taps clamped into its input instead of masked
# (kgen.infer._Builder.clamped). The GPU suite, squeezenet1_1 dynamic against static per kernel
# at batch 1 and 32, memcheck over the sanitizer workload (its squeezenet1_1 and resnet18 compile
# dynamic H, W: every clamped pool at small sizes) and capture's profile on CUDA.
# MIN=1: the suite and batch 32 only (what little device time is left). NOCAP=1: no capture
# profile.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
O=${OUT:-/tmp/out}
git rev-parse HEAD > $O/tree.txt 2>/dev/null; git status --short >> $O/tree.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $O/tree.txt
timeout 190 python3 -m pytest -q -m gpu -n 4 tests -p no:cacheprovider > $O/suite.txt 2>&1
tail -3 $O/suite.txt
B=1,32; [ -n "$MIN" ] && B=32
timeout 100 python3 data/bench/h100_stage4l/diag.py dynstatic squeezenet1_1 $B > $O/dynstatic.txt 2>&1
grep -E "batch [0-9]+: |device us per call" $O/dynstatic.txt
[ -n "$MIN" ] && exit 0
OUT=$O/sanitize LIMIT=90 .ci/gpu_sanitize memcheck > $O/sanitize.txt 2>&1
tail -15 $O/sanitize.txt
[ -n "$NOCAP" ] && exit 0   # no capture profile
timeout 40 python3 data/bench/h100_stage4o/capture.py resnet18 cuda > $O/capture_cuda.txt 2>&1
grep -E "capture [01]|^import" $O/capture_cuda.txt
