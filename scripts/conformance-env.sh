#!/usr/bin/env bash
# A venv with the REAL SGLang 0.5.23 and vLLM 0.33.0 (their Python sources, CPU-only), for
# scripts/conformance_check.py: their own argument parsers and SGLang's server-args resolution check
# every command line autotune builds (tests/test_conformance.py).
#
#   scripts/conformance-env.sh [--rebuild]
#   scripts/conformance-env.sh --cached   # the cached python's path, or exit 3 when there is none
#
# How: torch 2.13.0 (the CPU build pip finds on this machine's wheel folder), then sglang and vllm
# with --no-deps (their declared deps pull CUDA torch 2.14, flashinfer, sgl-kernel: several GB), then
# the pinned pure-Python/CPU packages their parser and resolution modules import (found by importing
# until nothing was missing), also --no-deps so nothing can pull a CUDA torch. GPU-only modules that are
# imported but never run by argument resolution (torchvision, sgl_kernel) are stubbed inside the
# checker, not installed. soundfile is there because SGLang's OpenAI server imports it at module level:
# with it (and the test tree's import shim, tests/sglang_cpu/) this venv also serves real SGLang on CPU.
#
# Cached outside the clone, keyed by the pinned versions and requirements:
#   ${AUTOTUNE_CACHE_DIR:-$HOME/.cache/autotune}/conformance-<key>/bin/python
# The python's path is the last line of stdout (progress goes to stderr), so callers can do:
#   AUTOTUNE_CONFORMANCE_PYTHON=$(scripts/conformance-env.sh | tail -n1)
set -euo pipefail

SGLANG_VERSION=0.5.23
VLLM_VERSION=0.34.0
TORCH_VERSION=2.13.0
PYTHON=${PYTHON:-python3}

rebuild=0
cached_only=0
case "${1:-}" in
  --rebuild) rebuild=1 ;;
  --cached) cached_only=1 ;;
  -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  "") ;;
  *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
esac

requirements=$(mktemp)
trap 'rm -f "$requirements"' EXIT
cat >"$requirements" <<'REQUIREMENTS'
agent-detector==2.0.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anthropic==2.14.0
anyio==4.16.0
apache-tvm-ffi==0.1.15.post2
astor==0.8.1
asttokens==3.0.2
attrs==26.1.0
blake3==1.0.11
cachetools==8.0.2
cbor2==6.3.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cloudpickle==3.1.3
compressed-tensors==0.17.0
cryptography==50.0.2
depyf==0.20.0
detect-installer==0.2.1
dill==0.4.1
dnspython==2.9.2
docstring_parser==0.18.0
einops==0.8.2
email-validator==2.4.0
executing==2.3.0
fastapi==0.136.3
fastapi-cli==0.0.34
fastapi-cloud-cli==0.28.0
fastar==0.12.0
fastsafetensors==0.5.0
filelock==4.3.1
frozenlist==1.8.0
fsspec==2026.9.0
gguf==0.19.0
googleapis-common-protos==1.76.0
grpcio==1.85.3
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpcore2==2.16.2
httptools==0.9.0
httpx==0.28.1
httpx2==2.16.2
huggingface_hub==1.33.0
humming-kernels==0.1.17
idna==3.20
ijson==3.6.0
instanttensor==0.2.2
interegular==0.3.3
ipython==9.18.1
ipython_pygments_lexers==1.1.1
jedi==0.20.1
Jinja2==3.1.6
jiter==0.19.0
jmespath==1.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
lark==1.2.2
llvmlite==0.47.0
lm-format-enforcer==0.11.3
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
matplotlib-inline==0.2.2
mcp==2.3.0
mcp-types==2.3.0
mdurl==0.1.2
mistral_common==1.13.1
ml_dtypes==0.6.0
model-hosting-container-standards==0.1.16
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
nccl-extensions==0.1.0
nccl4py==0.6.0
networkx==3.6.1
ninja==1.13.2
numba==0.65.0
numpy==2.3.5
nvtx==0.2.15
openai==3.57.0
openai-harmony==0.0.8
opencv-python-headless==5.0.0.93
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp==1.45.2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
opentelemetry-semantic-conventions-ai==0.5.1
orjson==3.13.0
oss-harmony==0.0.11
outlines_core==0.2.14
packaging==26.4
parso==0.8.7
partial-json-parser==0.2.1.1.post7
pexpect==4.9.0
pillow==13.0.0
prometheus-fastapi-instrumentator==8.1.0
prometheus_client==0.26.0
prompt_toolkit==3.0.53
propcache==0.5.4
protobuf==7.36.2
psutil==7.2.2
ptyprocess==0.7.0
pure_eval==0.2.4
py-cpuinfo==9.0.0
pybase64==1.5.1
pycountry==26.2.16
pycparser==3.12
pydantic==2.14.4
pydantic-extra-types==2.11.1
pydantic-settings==2.16.3
pydantic_core==2.50.5
Pygments==2.21.0
PyJWT==2.15.1
python-dotenv==1.2.4
python-json-logger==4.2.0
python-multipart==0.0.34
PyYAML==6.0.4
pyzmq==27.3.0
quack-kernels==0.6.5
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rich==15.0.0
rich-toolkit==0.20.6
rignore==0.8.1
rpds-py==2026.9.1
safetensors==0.8.0
sentencepiece==0.2.3
sentry-sdk==2.75.0
setproctitle==1.3.8
shellingham==1.5.4
sniffio==1.3.1
soundfile==0.14.0
sse-starlette==3.7.0
stack-data==0.6.3
starlette==1.10.0
supervisor==4.3.0
sympy==1.14.0
tabulate==0.10.0
tiktoken==0.14.0
tokenizers==0.23.2
torch_c_dlpack_ext==0.1.5
tqdm==4.70.1
traitlets==5.16.1
transformers==5.19.0
triton==3.9.0
truststore==0.10.5
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
urllib3==2.8.0
uvicorn==0.54.0
uvloop==0.23.0
watchfiles==1.3.0
xgrammar==0.2.8
llguidance==1.9.1
wcwidth==0.9.4
websockets==17.4
yarl==1.25.1
zstandard==0.25.0
REQUIREMENTS
# The key is what the env holds (the pins), not this script's text: editing how it is checked or
# reported does not cost a 4 GB reinstall.
key="sglang$SGLANG_VERSION-vllm$VLLM_VERSION-$({ echo "torch$TORCH_VERSION"; cat "$requirements"; } | sha256sum | cut -c1-12)"
venv=${AUTOTUNE_CACHE_DIR:-$HOME/.cache/autotune}/conformance-$key
if [ "$rebuild" = 0 ] && [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
  echo "$venv/bin/python"
  exit 0
fi
[ "$cached_only" = 0 ] || exit 3

rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
start=$(date +%s)
"$PYTHON" -m venv "$venv" >&2
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
echo "conformance env: torch $TORCH_VERSION (CPU)" >&2
"${pip[@]}" "torch==$TORCH_VERSION" >&2
echo "conformance env: sglang $SGLANG_VERSION, vllm $VLLM_VERSION and their parsers' imports (--no-deps)" >&2
"${pip[@]}" --no-deps "sglang==$SGLANG_VERSION" "vllm==$VLLM_VERSION" -r "$requirements" >&2
"$venv/bin/python" - <<'PY' >&2
import importlib.metadata as md, torch
assert torch.__version__.startswith("2.13.0") and torch.version.cuda is None, torch.__version__
print("sglang", md.version("sglang"), "vllm", md.version("vllm"), "torch", torch.__version__)
PY
touch "$venv/.complete"
echo "conformance env ready in $(( $(date +%s) - start )) s: $(du -sh "$venv" | cut -f1)" >&2
echo "$venv/bin/python"
