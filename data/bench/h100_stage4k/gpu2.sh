#!/bin/bash
# Issue 14, fifth session, second device call: DLCB dynamic (paired with its static twin) on
# the seven target models: cold compile and its phases, latency, first call at a new shape.
export PYTHONPATH=. PYTHONUNBUFFERED=1
O=${OUT:-/tmp/out}
timeout 560 python3 -m dlcb_lab.cli bench \
  --models resnet18,squeezenet1_1,resnet50,mobilenet_v3_large,efficientnet_b0,convnext_tiny,vit_b_16 \
  --systems dlcb-dynamic --paired --reps 20 --warmup 3 --timeout 150 --out $O/zoo > $O/zoo.txt 2>&1
tail -40 $O/zoo.txt
