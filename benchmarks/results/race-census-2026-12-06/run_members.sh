#!/bin/bash
# Replay every member of a slice, one process at a time, one JSON line per night.
# Usage: [TREE=DIR] bash run_members.sh OUT.jsonl CASE FIRST COUNT BUDGET SAMPLER [LAUNCH_SD|- [TOP]]
# (TREE: the tree whose code runs, default the worktree; an archive of main with one constant changed for dev.)
out=$1 case=$2 first=$3 count=$4 budget=$5 sampler=$6; shift 6
here=$(dirname "$0")
for seed in $(seq "$first" $((first + count - 1))); do
  nice -n 10 .venv/bin/python "$here/race_census.py" "${TREE:-.}" "$case" "$seed" "$budget" "$sampler" "$@" | grep -e '^JSON' -e '^MARKER' >> "$out.raw"
done
grep '^JSON' "$out.raw" | cut -c6- > "$out"
