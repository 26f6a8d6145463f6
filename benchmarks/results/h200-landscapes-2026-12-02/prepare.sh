#!/bin/bash
# Here, before the device run: the tree that travels (.h200run/tree: the commit plus this run's
# files over it), next to .whl (wheels) and .sdist (the trimmed llama-cpp-python sdist); all
# three are ignored through .git/info/exclude and passed with the run tool's carry.
set -eu
cd "$(git rev-parse --show-toplevel)"
rm -rf .h200run && mkdir -p .h200run/tree
git archive HEAD autotune autotune_twin scripts search_spaces pyproject.toml 'benchmarks/*.py' | tar x -C .h200run/tree
mkdir -p .h200run/tree/benchmarks/results
cp scripts/make-test-models.py benchmarks/record_landscape.py benchmarks/recorded.py .h200run/tree/
mv .h200run/tree/make-test-models.py .h200run/tree/scripts/
mv .h200run/tree/record_landscape.py .h200run/tree/recorded.py .h200run/tree/benchmarks/
cp -r benchmarks/results/h200-landscapes-2026-12-02 .h200run/tree/benchmarks/results/
echo "$(git rev-parse HEAD) with this run's files over it" > .h200run/tree/COMMIT
du -sh .h200run .whl .sdist
