#!/usr/bin/env bash
# Build llama.cpp's llama-server from the llama-cpp-python sdist (pinned), for autotune's real-engine
# tests and studies, without committing llama.cpp to this repository.
#
#   scripts/build-llama-server.sh [--cuda] [--jobs N] [--sdist FILE] [--rebuild]
#   scripts/build-llama-server.sh --cached [--cuda]  # the cached binary's path, or exit 3 when there is none
#   scripts/build-llama-server.sh --print-sdist     # download (once) and print the sdist's path
#
# --sdist uses an sdist already on disk (a machine without network); otherwise the pinned sdist is
# downloaded once with pip into the cache, beside the binaries.
#
# The binary is cached outside the clone, keyed by the pinned version and a hash of the cmake flags:
#   ${AUTOTUNE_CACHE_DIR:-$HOME/.cache/autotune}/llama-server/<version>-<hash>/llama-server
# A cached binary is reused; --rebuild always builds again. The binary's path is the last line of
# stdout (progress goes to stderr), so callers can do: AUTOTUNE_LLAMA_SERVER=$(scripts/build-...sh | tail -n1)
#
# Needs cmake, a C++ compiler and a Python with pip (PYTHON, default python3); --cuda needs nvcc.
# A CPU build takes about 12 minutes on 2 cores; a CUDA build (sm_90 only) about 5.5 on 16.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
PYTHON=${PYTHON:-python3}
CACHE_ROOT=${AUTOTUNE_CACHE_DIR:-$HOME/.cache/autotune}/llama-server

# The sdist is kept in the cache: the build and scripts/make-test-models.py (which takes the
# tokenizer of its test models from the vocab-only GGUF inside it) both read it.
fetch_sdist() {
  local dir="$CACHE_ROOT/sdist" file
  file="$dir/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  if [ ! -s "$file" ]; then
    echo "downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist) from PyPI" >&2
    mkdir -p "$dir"
    local python=$PYTHON
    if ! "$python" -m pip --version >/dev/null 2>&1; then  # e.g. Debian's python3 without pip: a venv has one
      "$PYTHON" -m venv "$dir/.pip-venv" >&2
      python=$dir/.pip-venv/bin/python
    fi
    "$python" -m pip download --quiet --no-deps --no-binary :all: \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$dir" >&2
  fi
  echo "$file"
}

cuda=0
rebuild=0
cached_only=0
print_sdist=0
jobs=$(nproc 2>/dev/null || echo 2)
sdist=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) cuda=1 ;;
    --rebuild) rebuild=1 ;;
    --cached) cached_only=1 ;;
    --print-sdist) print_sdist=1 ;;
    --jobs) jobs=$2; shift ;;
    --sdist) sdist=$2; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ "$print_sdist" = 1 ]; then
  fetch_sdist
  exit 0
fi

# The cmake flags are the cache key: change one and the binary is rebuilt in a new directory.
# LLAMA_USE_PREBUILT_UI=OFF is required (otherwise configure downloads the web UI); static libs
# make the cached binary self-contained.
cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_OPENSSL=OFF
  -DGGML_NATIVE=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
)
if [ "$cuda" = 1 ]; then
  cmake_flags+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
fi

key=$(printf '%s\n' "$LLAMA_CPP_PYTHON_VERSION" "${cmake_flags[@]}" | sha256sum | cut -c1-12)
dest="$CACHE_ROOT/$LLAMA_CPP_PYTHON_VERSION-$key"
binary="$dest/llama-server"

if [ "$rebuild" = 0 ] && [ -x "$binary" ]; then
  echo "cached: $binary" >&2
  echo "$binary"
  exit 0
fi
[ "$cached_only" = 0 ] || exit 3

for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "$tool not found (Debian: apt-get install -y cmake g++)" >&2; exit 1; }
done
if [ "$cuda" = 1 ]; then
  command -v nvcc >/dev/null || { echo "nvcc not found: --cuda needs the CUDA toolkit" >&2; exit 1; }
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/llama-server-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -z "$sdist" ]; then
  sdist=$(fetch_sdist)
fi
echo "extracting $sdist" >&2
tar -xzf "$sdist" -C "$work" --wildcards --exclude='*/.git' '*/vendor/llama.cpp/*'
src=$(ls -d "$work"/*/vendor/llama.cpp)

echo "configuring: ${cmake_flags[*]}" >&2
cmake -S "$src" -B "$work/build" "${cmake_flags[@]}" >&2
echo "building llama-server with $jobs jobs" >&2
cmake --build "$work/build" --target llama-server -j "$jobs" >&2

mkdir -p "$dest"
install -m 755 "$work/build/bin/llama-server" "$binary.tmp"
mv "$binary.tmp" "$binary"
{
  echo "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  printf '%s\n' "${cmake_flags[@]}"
} >"$dest/build-flags.txt"
"$binary" --version >&2 2>&1 || true
echo "$binary"
