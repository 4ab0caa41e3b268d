#!/bin/bash
# Issue 14 on the H100, seventh session: the window-kernel spellings (window.py, with the
# tree's emission in round 3), the GPU suite, and dynamic against static per kernel
# (../h100_stage4l/diag.py dynstatic) over the tree, in one run.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
O=${OUT:-/tmp/out}
git rev-parse HEAD > $O/tree.txt 2>/dev/null; git status --short >> $O/tree.txt
timeout 150 python3 data/bench/h100_stage4m/window.py > $O/window.txt 2>&1
grep -A6 " tree " $O/window.txt
timeout 200 python3 -m pytest -q -m gpu -n 4 tests -p no:cacheprovider > $O/suite.txt 2>&1
tail -3 $O/suite.txt
timeout 300 python3 data/bench/h100_stage4l/diag.py dynstatic squeezenet1_1,convnext_tiny,efficientnet_b0 1,8 > $O/dynstatic.txt 2>&1
grep -E "batch [0-9]+: |device us per call" $O/dynstatic.txt
