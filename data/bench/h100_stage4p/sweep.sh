#!/bin/bash
# Issue 14's acceptance sweep: bench.models through `dlcb-lab bench` (one process per model and
# system, empty caches), resumed across calls on one warm machine: each call runs for T seconds,
# then SIGTERM stops the sweep (its running cell killed, the finished ones kept in models.csv)
# and the next call picks up there. SYS: the systems (every call of one sweep takes the same
# configuration; the systems may grow). MODELS: the models (default: bench.models' nine).
# PYC=1: Python's bytecode cached under /tmp (the image's site-packages holds none and takes
# none: its every process compiles torch's sources again, ~1 s of each capture there).
export PYTHONUNBUFFERED=1 PYTHONPATH=.
[ -n "$PYC" ] && export PYTHONPYCACHEPREFIX=/tmp/dlcb_pycache
O=${OUT:-/tmp/out}
RUN=/tmp/dlcb_sweep
SYS=${SYS:-eager,torch.compile-cudagraphs,dlcb-static,dlcb-dynamic}
mkdir -p $RUN
if [ ! -f $RUN/tree.txt ]; then
  git rev-parse HEAD > $RUN/tree.txt 2>/dev/null; git status --short >> $RUN/tree.txt
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $RUN/tree.txt
fi
echo "=== $(date -u +%FT%TZ) systems $SYS, ${T:-540} s" >> $RUN/log.txt
timeout ${T:-540} python3 -m dlcb_lab.cli bench --systems $SYS ${MODELS:+--models $MODELS} \
  --paired --timeout 300 \
  --out $RUN --markdown >> $RUN/log.txt 2>&1
echo "=== exit $?" >> $RUN/log.txt
cp -r $RUN $O/sweep
tr '\r' '\n' < $RUN/log.txt | grep -vE "^\s*[0-9]+%|cell/s|it/s" | tail -40
python3 -c "import pandas as pd; d=pd.read_csv('$RUN/models.csv'); m=d[d.metric=='ms']; print(m.groupby(['model','system']).value.count().to_string())" 2>&1 | tail -40
