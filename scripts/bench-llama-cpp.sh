#!/usr/bin/env bash
# Side by side on the same GGUF, prompt and lengths, 2 threads: `stencil bench` (release
# build) and llama.cpp through llama-cpp-python (built from source for this CPU's SIMD
# extensions, AMX off: scripts/llama-cpp-cmake-args.sh; in a virtualenv under target/; a
# yardstick, never a dependency of stencil's crates). Prints the
# two JSON lines, stencil's first. Arguments go to both, e.g.
#   scripts/bench-llama-cpp.sh --prompt-tokens 256 --decode-tokens 32 --context 16 --context 256
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/target/py-llama"
pin="llama-cpp-python==0.3.36"
cmake_args="$(scripts/llama-cpp-cmake-args.sh)"
stamp="$venv/.installed-$(echo "$pin $cmake_args" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS, and a wheel built elsewhere for
  # other CPU flags may not run here.
  CMAKE_ARGS="$cmake_args" "$venv/bin/pip" install --quiet --disable-pip-version-check \
    --no-cache-dir "$pin" numpy
  touch "$stamp"
fi
model="$(scripts/fetch-model.sh)"
cargo build --release --quiet -p stencil-cli
target/release/stencil bench --model "$model" "$@" 2>/dev/null
"$venv/bin/python" scripts/bench-llama-cpp.py --model "$model" --threads 2 "$@"
