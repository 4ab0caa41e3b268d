#!/bin/bash
# Issue 14, ninth session: the seven models under eager and DLCB dynamic with --paired
# (a static compile per batch timed in turn with the dynamic one in the same process).
export PYTHONUNBUFFERED=1 PYTHONPATH=.
O=${OUT:-/tmp/out}
timeout 520 python3 -m dlcb_lab.cli bench \
  --models squeezenet1_1,resnet18,resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny,vit_b_16 \
  --systems dlcb-dynamic,eager --paired --reps 20 --warmup 3 --timeout 150 --out $O/paired > $O/paired.txt 2>&1
tail -30 $O/paired.txt
