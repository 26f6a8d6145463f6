#!/bin/sh
# Every spent wide-trees member (members.txt) replayed at 20 launches on this tree's code, then the worst at 60.
cd "$(dirname "$0")/../../.."
for seed in 50208 50002 49201 49015 49109 49103 49107 47132 47124 47127 47125 49006 49009 49602 49800 49806 49812 49815; do
  nice -n 10 .venv/bin/python benchmarks/results/wide-census-2026-12-06/wide_replay.py . $seed 20 > benchmarks/results/wide-census-2026-12-06/out/model-$seed-20.txt 2>&1
done
for seed in 50002 50208 49201 49015 47132; do
  nice -n 10 .venv/bin/python benchmarks/results/wide-census-2026-12-06/wide_replay.py . $seed 60 > benchmarks/results/wide-census-2026-12-06/out/model-$seed-60.txt 2>&1
done
echo finished > benchmarks/results/wide-census-2026-12-06/out/finished
