#!/bin/sh
# mk.sh NAME WEIGHT_EXPR SIBLING(1/0): a dev tree from the worktree's files with the prior's light weight and the sibling role set
set -e
T=/tmp/vdev/$1; rm -rf $T; mkdir -p $T
cd /work/wt-verify && git ls-files -co --exclude-standard | tar -cf - -T - | tar -x -C $T
sed -i "s|^IDENTIFIED_PRIOR_WEIGHT = .*|IDENTIFIED_PRIOR_WEIGHT = $2|" $T/passmodel/calibrate.py
if [ "$3" = 0 ]; then sed -i 's|startup = self._startup(profile, space, launched, pool, dead) or self._sibling(profile, space, launched, dead)|startup = self._startup(profile, space, launched, pool, dead)|' $T/autotune/study/guided.py; fi
grep -n "^IDENTIFIED_PRIOR_WEIGHT\|startup = self._startup" $T/passmodel/calibrate.py $T/autotune/study/guided.py
