#!/bin/bash
# Issue 14, eleventh session, last call: a new shape's first call on efficientnet_b0, DLCB against
# eager channels-last and NCHW, one process each (first.py).
export PYTHONPATH=. PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
for s in dlcb eager-nhwc eager; do
  timeout 60 python3 data/bench/h100_stage4q/first.py $s > $O/first_$s.txt 2>&1
  grep -E "batch|captures" $O/first_$s.txt
done
