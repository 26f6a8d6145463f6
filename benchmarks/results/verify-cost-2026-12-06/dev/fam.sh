#!/bin/sh
# fam.sh TREE CASE FIRST COUNT BUDGET: the autotune-model row of search_efficiency on tree TREE's code
T=$1; C=$2; F=$3; N=$4; B=$5; mkdir -p /tmp/vdev/fam
cd /tmp/vdev/$T && nice -n 10 /work/wt-verify/.venv/bin/python -c "
import sys; sys.path.insert(0, '.')
import autotune.study.guided as g, benchmarks.search_efficiency as se; print('MARKER', g.__file__, se.__file__, flush=True)
sys.exit(se.main(sys.argv[1:]))" --family $N --family-seed $F --family-case $C --budget $B --methods autotune-model --unmodelled --json /tmp/vdev/fam/$T-$C-$B-$F.json > /tmp/vdev/fam/$T-$C-$B-$F.txt 2>&1
