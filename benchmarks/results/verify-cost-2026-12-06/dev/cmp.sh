#!/bin/bash
# cmp.sh BUDGET TREES...: regret per wide member, census (main) and each dev tree
B=$1; shift
printf "%-6s %6s" seed main; for t in "$@"; do printf " %6s" $t; done; echo
for f in /work/wt-verify/benchmarks/results/wide-census-2026-12-06/out/model-*-$B.txt; do
  s=$(basename $f | cut -d- -f2); printf "%-6s %6s" $s $(grep -oP "night of $B \(model\): regret \K[\d.]+" $f)
  for t in "$@"; do printf " %6s" $(grep -oP "night of $B \(model\): regret \K[\d.]+" /tmp/vdev/out-$t/model-$s-$B.txt 2>/dev/null || echo -); done; echo
done
