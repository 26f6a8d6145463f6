#!/bin/bash
# Two real landscapes on one GPU, detached (setsid): one CUDA build, the two model sets written
# during it, then both grids recorded in whole passes (drafts pass 1, deep pass 1, drafts passes 2
# and 3, deep passes 2 and 3), so that each landscape holds whole passes when the lease's time runs
# out. Second attempt: the first lost its machine (released between two polls) after deep pass 1
# had shown flash-attn off launches measuring 5-8 s (on: 1.3-1.7 s), so both grids are flash-attn on.
#   setsid bash pipeline.sh SRC END_EPOCH &   (SRC: the repository copy holding .h200run .whl .sdist)
# Everything lands in /tmp/run; each poll copies it to $OUT.
set -u
SRC=$1
END=$2  # epoch seconds by which the recording stops (what the device budget allows)
R=/tmp/run
mkdir -p $R
exec > $R/pipeline.log 2>&1
t0=$(date +%s)
stamp() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - t0 ))s] $*"; }
fail() { stamp "FAILED: $*"; echo FAIL > $R/done; exit 1; }
stamp "start; recording stops by $(date -u -d @"$END" +%H:%M:%S)"
rm -rf /tmp/repo && mkdir -p /tmp/repo
# .h200run/tree: the committed tree (git archive) with this run's files over it, so that helpers'
# uncommitted work in the checkout does not travel into the recording.
cp -a "$SRC"/.h200run/tree/. /tmp/repo/ && cp -a "$SRC"/.whl "$SRC"/.sdist /tmp/repo/ || fail "copy"
cd /tmp/repo
cat COMMIT
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
nproc; python3 --version
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || fail "wheels"
export PYTHONPATH=/tmp/site:/tmp/repo PYTHONUNBUFFERED=1 COLUMNS=160 TERM=dumb AUTOTUNE_CACHE_DIR=/tmp/atcache
python3 -c "import optuna, sqlalchemy, pydantic, httpx, yaml, gguf, numpy; print('imports ok')" || fail "imports"
SD=/tmp/repo/.sdist/llama_cpp_python-0.3.36.tar.gz
stamp "both model sets (in the background) and the CUDA build"
# deep: 40 layers (the earlier H200 landscape had 24), hidden 2048, ffn 5632, q8_0, a 2-layer draft.
( python3 scripts/make-test-models.py /tmp/models-deep --layers 40 --draft-layers 2 --hidden 2048 --ffn 5632 \
    --head-dim 128 --type q8_0 --vocab $SD > $R/models-deep.log 2>&1; echo $? > $R/models-deep.rc ) &
# drafts: 32 layers, hidden 2560, ffn 6912, q4_0; the target's first 2 layers carry the draft's
# update, so the 1-layer draft misses half of it and the 4-layer one costs twice the 2-layer one.
( python3 scripts/make-test-models.py /tmp/models-drafts --layers 32 --draft-layers 2 --extra-drafts 1,2,4 \
    --hidden 2560 --ffn 6912 --head-dim 128 --type q4_0 --vocab $SD > $R/models-drafts.log 2>&1
  echo $? > $R/models-drafts.rc ) &
scripts/build-llama-server.sh --cuda --jobs 16 --sdist $SD > $R/build.out 2> $R/build.err
brc=$?
stamp "build rc=$brc"; tail -n 3 $R/build.err
[ $brc = 0 ] || { tail -n 60 $R/build.err; fail build; }
export AUTOTUNE_LLAMA_SERVER=$(tail -n1 $R/build.out)
wait
for set in deep drafts; do
  stamp "models-$set rc=$(cat $R/models-$set.rc)"; cat $R/models-$set.log; ls -la /tmp/models-$set
  [ "$(cat $R/models-$set.rc)" = 0 ] || fail "models-$set"
done
"$AUTOTUNE_LLAMA_SERVER" --version 2>&1 | head -n 2

# The recording's protocol: 1 warm-up, rounds of 2 prompts x 64 tokens, 2-3 rounds (a few seconds a
# launch; the variation between launches, which the 3 launches hold, is larger than within one).
MEASURE=(--measure warmup_requests=1 --measure prompts_per_round=2 --measure max_tokens=64
         --measure min_rounds=2 --measure max_rounds=3 --measure max_seconds=5)
DEEP=(search_spaces/llamacpp-gpu.yaml --name h200-llamacpp-deep --seed 1
      --grid spec-type=none,draft-simple --grid spec-draft-n-max=1,2,3,4,5,6,8,10,12,16 --grid spec-draft-p-min=0.0,0.2
      --grid flash-attn=on --grid ctx-size=4096 --grid parallel=1,4 --grid batch-size=2048 --grid ubatch-size=512
      --out $R/h200-llamacpp-deep.json)
M=/tmp/models-drafts
DRAFTS=(benchmarks/results/h200-landscapes-2026-12-02/llamacpp-gpu-drafts.yaml --name h200-llamacpp-drafts --seed 2
        --grid spec-type=none,draft-simple --grid spec-draft-model=$M/draft-1L.gguf,$M/draft-2L.gguf,$M/draft-4L.gguf
        --grid spec-draft-n-max=1,2,3,4,6,10,16 --grid spec-draft-p-min=0.0,0.1 --grid flash-attn=on
        --grid ctx-size=4096 --grid parallel=1 --grid batch-size=2048 --grid ubatch-size=512
        --out $R/h200-llamacpp-drafts.json)
for step in drafts:1 deep:1 drafts:2 drafts:3 deep:2 deep:3; do
  set=${step%:*}; launches=${step#*:}
  left=$(( END - $(date +%s) ))
  [ $left -gt 20 ] || { stamp "no time left for $set pass $launches"; continue; }
  stamp "$set: pass $launches (deadline ${left}s)"
  if [ $set = deep ]; then
    AUTOTUNE_LLAMA_MODELS=/tmp/models-deep python3 benchmarks/record_landscape.py "${DEEP[@]}" "${MEASURE[@]}" \
      --launches $launches --deadline-s $left > $R/$set-pass$launches.log 2>&1
  else
    python3 benchmarks/record_landscape.py "${DRAFTS[@]}" "${MEASURE[@]}" \
      --launches $launches --deadline-s $left > $R/$set-pass$launches.log 2>&1
  fi
  stamp "$set pass $launches: exit $? ($(tail -n 1 $R/$set-pass$launches.log))"
done
stamp "all done"
echo DONE > $R/done
