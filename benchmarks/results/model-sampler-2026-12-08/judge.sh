#!/bin/bash
# Round 4 held-out run: every row its own process, side by side, nice -n 10.
set -u
D=/work/wt-model5/benchmarks/results/model-sampler-2026-12-08
P=/work/wt-model5/.venv/bin/python
NEW=/tmp/m5/judge-new BP=/tmp/m5/bp
PART=${1:-all}
if [ $PART != base ]; then rm -rf $NEW && mkdir -p $NEW && git -C /work/wt-model5 archive HEAD | tar -x -C $NEW && cp /work/wt-model5/benchmarks/results/model-sampler-2026-12-08/run_bp.py $NEW/
echo "new tree: $(git -C /work/wt-model5 rev-parse HEAD) (autotune-model rows)" >> $D/trees.txt; fi
[ $PART != new ] && echo "tpe, random and branch-point rows: the archive of ac62c90 in $BP, started $(date -u)" >> $D/trees.txt
run() { # TREE OUTNAME ARGS...
  local tree=$1 out=$2; shift 2
  (cd $tree && nice -n 10 $P run_bp.py "$@" --unmodelled --json $D/$out.json > $D/$out.txt 2>&1) &
}
for B in 20 60; do
  [ $PART != new ] && for R in autotune-tpe random-runner; do
    run $BP all-$B-$R --family 16 --family-seed 49200 --budget $B --methods $R
    run $BP tight-$B-$R --family 6 --family-case tight --family-seed 49500 --budget $B --methods $R
  done
  TS="new bp"; [ $PART = base ] && TS=bp; [ $PART = new ] && TS=new
  for T in $TS; do
    tree=$NEW; name=autotune-model; [ $T = bp ] && tree=$BP && name=branch-point-model
    run $tree tight-$B-$name --family 6 --family-case tight --family-seed 49500 --budget $B --methods autotune-model
    if [ $B = 20 ]; then
      run $tree all-$B-$name --family 16 --family-seed 49200 --budget $B --methods autotune-model
    else
      run $tree all-$B-$name-1 --family 8 --family-seed 49200 --budget $B --methods autotune-model
      run $tree all-$B-$name-2 --family 8 --family-seed 49208 --budget $B --methods autotune-model
    fi
  done
done
wait
echo "part $PART finished $(date -u)" >> $D/finished.txt
