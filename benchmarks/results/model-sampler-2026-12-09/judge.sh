#!/bin/bash
# Round 5 held-out run: every row its own process, side by side, nice -n 10.
set -u
W=/work/wt-model6
D=$W/benchmarks/results/model-sampler-2026-12-09
P=$W/.venv/bin/python
NEW=/tmp/m6/judge-new BP=/tmp/m6/judge-bp
rm -rf $NEW $BP && mkdir -p $NEW $BP
git -C $W archive HEAD | tar -x -C $NEW && cp $W/benchmarks/results/model-sampler-2026-12-08/run_bp.py $NEW/
git -C $W archive 7ec864c | tar -x -C $BP && cp $W/benchmarks/results/model-sampler-2026-12-08/run_bp.py $BP/
echo "new tree: $(git -C $W rev-parse HEAD) (autotune-model rows) in $NEW" >> $D/trees.txt
echo "tpe, random and branch-point rows: the archive of 7ec864c in $BP, started $(date -u)" >> $D/trees.txt
run() { # TREE OUTNAME ARGS...
  local tree=$1 out=$2; shift 2
  (cd $tree && nice -n 10 $P run_bp.py "$@" --unmodelled --json $D/$out.json > $D/$out.txt 2>&1) &
}
for B in 20 60; do
  for R in autotune-tpe random-runner; do
    run $BP all-$B-$R --family 16 --family-seed 49600 --budget $B --methods $R
    run $BP tight-$B-$R --family 6 --family-case tight --family-seed 49700 --budget $B --methods $R
  done
  for T in new bp; do
    tree=$NEW; name=autotune-model; [ $T = bp ] && tree=$BP && name=branch-point-model
    run $tree tight-$B-$name --family 6 --family-case tight --family-seed 49700 --budget $B --methods autotune-model
    if [ $B = 20 ]; then
      run $tree all-$B-$name --family 16 --family-seed 49600 --budget $B --methods autotune-model
    else
      run $tree all-$B-$name-1 --family 8 --family-seed 49600 --budget $B --methods autotune-model
      run $tree all-$B-$name-2 --family 8 --family-seed 49608 --budget $B --methods autotune-model
    fi
  done
done
wait
echo "finished $(date -u)" >> $D/finished.txt
