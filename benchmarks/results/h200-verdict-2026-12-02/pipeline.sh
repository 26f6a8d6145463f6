#!/bin/bash
# The whole real-GPU run, detached (setsid): build, models, study, show, export, bench x2.
# Everything lands in /tmp/run; watch.sh copies it to $OUT.
set -u
SRC=$1
R=/tmp/run
mkdir -p $R
exec > $R/pipeline.log 2>&1
t0=$(date +%s)
stamp() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - t0 ))s] $*"; }
fail() { stamp "FAILED: $*"; echo FAIL > $R/done; exit 1; }
stamp "start; copying the tree to /tmp/repo"
rm -rf /tmp/repo && mkdir -p /tmp/repo
cp -a "$SRC"/autotune "$SRC"/autotune_twin "$SRC"/scripts "$SRC"/search_spaces "$SRC"/pyproject.toml "$SRC"/.whl "$SRC"/.sdist /tmp/repo/
cd /tmp/repo
git -C "$SRC" rev-parse HEAD 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
nproc; python3 --version
stamp "installing wheels"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || fail "wheels"
export PYTHONPATH=/tmp/site:/tmp/repo PYTHONUNBUFFERED=1 COLUMNS=160 TERM=dumb
export AUTOTUNE_CACHE_DIR=/tmp/atcache AUTOTUNE_LLAMA_MODELS=/tmp/models
mkdir -p /tmp/bin
printf '#!/usr/bin/env python3\nimport sys\nfrom autotune.entry import main\nsys.exit(main())\n' > /tmp/bin/autotune
chmod +x /tmp/bin/autotune
export PATH=/tmp/bin:$PATH
python3 -c "import optuna, sqlalchemy, pydantic, typer, rich, httpx, yaml, pynvml, prometheus_client, gguf, numpy; print('imports ok: optuna', optuna.__version__, 'typer', typer.__version__, 'numpy', numpy.__version__)" || fail "imports"
SD=/tmp/repo/.sdist/llama_cpp_python-0.3.36.tar.gz
stamp "test models (in the background) and the CUDA build"
( python3 scripts/make-test-models.py /tmp/models --layers 24 --hidden 2048 --head-dim 128 --type q8_0 --vocab $SD > $R/models.log 2>&1; echo $? > $R/models.rc ) &
mp=$!
scripts/build-llama-server.sh --cuda --jobs 16 --sdist $SD > $R/build.out 2> $R/build.err
brc=$?
stamp "build rc=$brc"; tail -n 5 $R/build.err
[ $brc = 0 ] || { tail -n 60 $R/build.err; fail build; }
export AUTOTUNE_LLAMA_SERVER=$(tail -n1 $R/build.out)
wait $mp
stamp "models rc=$(cat $R/models.rc)"; cat $R/models.log; ls -la /tmp/models
[ "$(cat $R/models.rc)" = 0 ] || fail models
echo "AUTOTUNE_LLAMA_SERVER=$AUTOTUNE_LLAMA_SERVER"
stamp "autotune check"
autotune check search_spaces/llamacpp-gpu.yaml; echo "check exit $?"
stamp "autotune study (--timeout 5m, default confirmation)"
echo '$ autotune study search_spaces/llamacpp-gpu.yaml --timeout 5m --seed 1 --studies-dir /tmp/studies' > $R/study.txt
autotune study search_spaces/llamacpp-gpu.yaml --timeout 5m --seed 1 --studies-dir /tmp/studies >> $R/study.txt 2>&1
echo "exit $?" >> $R/study.txt
stamp "study done: $(tail -n1 $R/study.txt)"
echo '$ autotune show llamacpp-gpu' > $R/show.txt
autotune show llamacpp-gpu --studies-dir /tmp/studies >> $R/show.txt 2>&1; echo "exit $?" >> $R/show.txt
autotune show llamacpp-gpu --studies-dir /tmp/studies --json > $R/show.json 2> $R/show-json.err; stamp "show --json exit $?"; cat $R/show-json.err
autotune export llamacpp-gpu --studies-dir /tmp/studies --format yaml -o $R/profile.yaml; stamp "export exit $?"
for i in 1 2; do
  stamp "bench $i"
  { echo "\$ autotune bench --profile profile.yaml   (run $i, fresh launch)"
    autotune bench --profile $R/profile.yaml --workdir /tmp/studies/bench$i 2>&1; echo "exit $?"; echo; } >> $R/bench.txt
  stamp "bench $i: $(tail -n 3 $R/bench.txt | head -n 2 | tr '\n' ' ')"
done
stamp "all done"
echo DONE > $R/done
