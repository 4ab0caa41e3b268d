#!/bin/bash
# Issue 14, eleventh session, first call: the GPU check (suite, squeezenet1_1 dynamic against
# static, memcheck: ../h100_stage4o/gpu.sh), then the cold compile of three
# models in fresh processes with the image's uncached bytecode and with it cached (PYC).
O=${OUT:-/tmp/out}
NOCAP=1 bash data/bench/h100_stage4o/gpu.sh
export PYTHONPATH=. PYTHONUNBUFFERED=1
C=$O/cold.txt
for m in resnet18 mobilenet_v3_large efficientnet_b0; do
  echo "plain $(timeout 60 python3 data/bench/h100_stage4q/cold.py $m 2>/dev/null | tail -1)" >> $C
done
export PYTHONPYCACHEPREFIX=/tmp/dlcb_pycache
for pass in fill cached; do for m in resnet18 mobilenet_v3_large efficientnet_b0; do
  echo "pyc-$pass $(timeout 60 python3 data/bench/h100_stage4q/cold.py $m 2>/dev/null | tail -1)" >> $C
  [ $pass = fill ] && break
done; done
cat $C
