#!/bin/bash
# The census's replays, one process at a time (main's code: the worktree's tree), one JSON line per night.
# Usage: bash run_all.sh OUT.jsonl [launch_sd]
out=$1; shift
here=$(dirname "$0")
while read -r case seed budget sampler; do
  nice -n 10 .venv/bin/python "$here/race_census.py" . "$case" "$seed" "$budget" "$sampler" "$@" | grep '^JSON' | cut -c6- >> "$out"
done <<'LIST'
all 49803 20 model
all 49804 20 model
all 49807 20 model
all 49808 20 model
all 49810 20 model
all 49813 20 model
all 50001 20 model
all 50003 20 model
all 49802 60 model
all 49803 60 model
all 49804 60 model
all 50003 60 model
all 50005 60 model
tight 50105 60 model
all 49802 20 tpe
all 49807 20 tpe
all 49810 20 tpe
all 49813 20 tpe
all 49814 20 tpe
all 50004 20 tpe
all 50008 20 tpe
LIST
