#!/usr/bin/env bash
# Side by side on the same GGUF, prompt and lengths, 2 threads: `stencil bench` (release
# build) and llama.cpp through llama-cpp-python (built from source with AMX kernels off, in a
# virtualenv under target/; a yardstick, never a dependency of stencil's crates). Prints the
# two JSON lines, stencil's first. Arguments go to both, e.g.
#   scripts/bench-llama-cpp.sh --prompt-tokens 256 --decode-tokens 32 --context 16 --context 256
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/target/py-llama"
pin="llama-cpp-python==0.3.36"
if [ ! -f "$venv/.installed-$pin" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  CMAKE_ARGS="-DGGML_AMX=OFF" "$venv/bin/pip" install --quiet --disable-pip-version-check "$pin" numpy
  touch "$venv/.installed-$pin"
fi
model="$(scripts/fetch-model.sh)"
cargo build --release --quiet -p stencil-cli
target/release/stencil bench --model "$model" "$@" 2>/dev/null
"$venv/bin/python" scripts/bench-llama-cpp.py --model "$model" --threads 2 "$@"
