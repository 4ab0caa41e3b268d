#!/bin/bash
# Issue 14 on the H100, seventh session, second run: the max pool spellings (maxpool.py), the
# GPU suite, and bench.models for eager and dlcb-dynamic (paired with a static compile) over
# the seven TorchVision models at batch 1/8/32, over the tree.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
O=${OUT:-/tmp/out}
git rev-parse HEAD > $O/tree2.txt 2>/dev/null; git status --short >> $O/tree2.txt
(cd data/bench/h100_stage4m && PYTHONPATH=../../.. timeout 60 python3 maxpool.py) > $O/maxpool2.txt 2>&1
cat $O/maxpool2.txt
timeout 200 python3 -m pytest -q -m gpu -n 4 tests -p no:cacheprovider > $O/suite2.txt 2>&1
tail -2 $O/suite2.txt
timeout 300 python3 -m dlcb_lab.bench.models --models resnet18,squeezenet1_1,resnet50,mobilenet_v3_large,convnext_tiny,efficientnet_b0,vit_b_16 --systems eager,dlcb-dynamic --paired --batches 1,8,32 --timeout 120 --markdown --out $O/models > $O/models.txt 2>&1
tail -40 $O/models.txt
