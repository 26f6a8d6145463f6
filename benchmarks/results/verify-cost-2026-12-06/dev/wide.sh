#!/bin/bash
# wide.sh NAME BUDGET SEEDS...: the census's replay on tree NAME (skips seeds with a finished output)
T=$1; B=$2; shift 2; mkdir -p /tmp/vdev/out-$T
for s in "$@"; do
  f=/tmp/vdev/out-$T/model-$s-$B.txt
  grep -q "the pool (300 draws)" $f 2>/dev/null && continue
  nice -n 10 /work/wt-verify/.venv/bin/python /work/wt-verify/benchmarks/results/wide-census-2026-12-06/wide_replay.py /tmp/vdev/$T $s $B > $f 2>&1
  echo "$s rc $?"
done
echo done > /tmp/vdev/out-$T/finished-$B
