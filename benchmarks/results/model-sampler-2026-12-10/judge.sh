#!/bin/bash
# Round 6 held-out run: every row its own process, side by side, nice -n 10.
# judge.sh rest: TPE's, random draws' and the branch point's model rows (the archive of 3ca4f1e);
# judge.sh model: this round's model rows (the archive of HEAD), started once the dev check had passed.
set -u
PHASE=$1
W=/work/wt-model7
D=$W/benchmarks/results/model-sampler-2026-12-10
P=$W/.venv/bin/python
NEW=/tmp/m7/judge-new BP=/tmp/m7/judge-bp
if [ $PHASE = model ]; then
  rm -rf $NEW && mkdir -p $NEW
  git -C $W archive HEAD | tar -x -C $NEW && cp $W/benchmarks/results/model-sampler-2026-12-08/run_bp.py $NEW/
  echo "new tree: $(git -C $W rev-parse HEAD) (autotune-model rows) in $NEW, started $(date -u)" >> $D/trees.txt
else
  rm -rf $BP && mkdir -p $BP
  git -C $W archive 3ca4f1e | tar -x -C $BP && cp $W/benchmarks/results/model-sampler-2026-12-08/run_bp.py $BP/
  echo "tpe, random and branch-point rows: the archive of 3ca4f1e in $BP, started $(date -u)" >> $D/trees.txt
fi
run() { # TREE OUTNAME ARGS...
  local tree=$1 out=$2; shift 2
  (cd $tree && nice -n 10 $P run_bp.py "$@" --unmodelled --json $D/$out.json > $D/$out.txt 2>&1) &
}
for B in 20 60; do
  for R in autotune-tpe random-runner; do
    [ $PHASE = model ] && continue
    run $BP all-$B-$R --family 16 --family-seed 49800 --budget $B --methods $R
    run $BP tight-$B-$R --family 6 --family-case tight --family-seed 49900 --budget $B --methods $R
  done
  for T in new bp; do
    [ $PHASE = model ] && [ $T = bp ] && continue
    [ $PHASE = rest ] && [ $T = new ] && continue
    tree=$NEW; name=autotune-model; [ $T = bp ] && tree=$BP && name=branch-point-model
    run $tree tight-$B-$name --family 6 --family-case tight --family-seed 49900 --budget $B --methods autotune-model
    if [ $B = 20 ]; then
      run $tree all-$B-$name --family 16 --family-seed 49800 --budget $B --methods autotune-model
    else
      run $tree all-$B-$name-1 --family 8 --family-seed 49800 --budget $B --methods autotune-model
      run $tree all-$B-$name-2 --family 8 --family-seed 49808 --budget $B --methods autotune-model
    fi
  done
done
wait
echo "$PHASE finished $(date -u)" >> $D/finished.txt
