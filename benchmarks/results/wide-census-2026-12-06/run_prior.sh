#!/bin/sh
# prior_off.py on round 7's and round 8's family members (50000-50011, 50200-50211), every case, at 20 launches.
cd "$(dirname "$0")/../../.."
for seed in $(seq 50000 50011) $(seq 50200 50211); do
  nice -n 10 .venv/bin/python benchmarks/results/wide-census-2026-12-06/prior_off.py . $seed 20 2>&1
done > benchmarks/results/wide-census-2026-12-06/out/prior-off-20.txt
