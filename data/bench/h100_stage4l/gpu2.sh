#!/bin/bash
# Issue 14, sixth session: the GPU suite with the warp entry point's lanes per output a template
# argument (kgen.emit.group_lanes: 16 for literal rows of at most 64, else 32), and the
# memory-bound kernels before (_base: the last commit's dlcb_lab) and after, in one run.
export PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
git rev-parse HEAD > $O/gpu2_tree.txt 2>/dev/null; git status --short >> $O/gpu2_tree.txt
PYTHONPATH=. timeout 240 python3 -m pytest -q -m gpu -n 4 tests -p no:cacheprovider > $O/gpu2_suite.txt 2>&1
tail -3 $O/gpu2_suite.txt
for t in base new; do
  P=.; [ $t = base ] && P=_base
  PYTHONPATH=$P timeout 100 python3 -m dlcb_lab.bench.bandwidth --backend cuda --no-inductor --out $O/bandwidth_$t.csv > $O/bandwidth_$t.txt 2>&1
  echo "== $t"; grep -A200 "pct_copy" $O/bandwidth_$t.txt | grep -E "^[a-z_]+ |^ +128" | head -30
  PYTHONPATH=$P timeout 120 python3 data/bench/h100_stage4k/diag.py pool > $O/pool_$t.txt 2>&1
  cat $O/pool_$t.txt
done
