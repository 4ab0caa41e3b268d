#!/bin/bash
# Issue 14 on the H100, seventh session, third run: the GPU suite, then bench.models for eager
# and dlcb-dynamic (paired with a static compile) over the seven TorchVision models, over the
# tree (the second run found the unguarded-load change reading cat's narrowed coordinates).
export PYTHONUNBUFFERED=1 PYTHONPATH=.
O=${OUT:-/tmp/out}
git rev-parse HEAD > $O/tree3.txt 2>/dev/null; git status --short >> $O/tree3.txt
timeout 140 python3 -m pytest -q -m gpu -n 4 -x tests -p no:cacheprovider > $O/suite3.txt 2>&1
tail -2 $O/suite3.txt
timeout 220 python3 -m dlcb_lab.bench.models --models resnet18,squeezenet1_1,resnet50,mobilenet_v3_large,convnext_tiny,efficientnet_b0,vit_b_16 --systems eager,dlcb-dynamic --paired --batches 1,8,32 --timeout 60 --markdown --out $O/models > $O/models3.txt 2>&1
tail -30 $O/models3.txt
