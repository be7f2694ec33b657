#!/usr/bin/env bash
# Builds the Python package (crates/stencil-python, PyO3 + maturin, release) into a virtualenv
# under target/ and runs its tests with pytest: the API, masks identical to the Rust matcher's
# on a MaskBench sample, real generations through transformers (CPU torch) and
# llama-cpp-python on the default model, and the vLLM adapter against vLLM's own interface
# classes. Needs python3, the default model (scripts/fetch-model.sh) and target/debug/stencil
# (cargo test builds it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if ! command -v python3 >/dev/null; then
  echo "NOTICE: python3 not found; skipping the Python package tests" >&2
  exit 0
fi
venv="$root/target/py-stencil"
req="crates/stencil-python/tests/requirements.txt"
# vLLM is installed without its dependencies: its wheels are CUDA builds whose dependency tree
# includes other constrained-decoding engines; its logits-processor interface imports alone.
vllm_pin="vllm==0.34.0"
# llama.cpp is built for this CPU's SIMD extensions with AMX off (see the script).
cmake_args="$(scripts/llama-cpp-cmake-args.sh)"
stamp="$venv/.requirements-$(cat "$req" <(echo "$vllm_pin $cmake_args") | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  llama_pin="$(grep -o '^llama-cpp-python==[^ ]*' "$req")"
  # llama-cpp-python first, without pip's wheel cache (which ignores CMAKE_ARGS: a wheel built
  # elsewhere for other CPU flags may not run here), then the rest.
  CMAKE_ARGS="$cmake_args" "$venv/bin/pip" install --quiet --disable-pip-version-check \
    --no-cache-dir --no-deps "$llama_pin"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps "$vllm_pin"
  touch "$stamp"
fi
# A folder of its own, emptied first: exactly one wheel, this build's.
wheels="$root/target/py-stencil-wheel"
rm -rf "$wheels"
(cd crates/stencil-python && "$venv/bin/maturin" build --release --quiet -o "$wheels")
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall \
  "$wheels"/stencil-*.whl
# llama.cpp's grammars/ folder as the pinned llama-cpp-python source package ships it (its
# vendored llama.cpp): the GBNF test compiles every file and checks generations against them.
llama_pin="$(grep -o '^llama-cpp-python==[^ ]*' "$req")"
gbnf_dir="$root/target/llama-cpp-grammars/${llama_pin#*==}"
if [ ! -d "$gbnf_dir" ]; then
  sdist="$(mktemp -d)"
  "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    --no-binary llama-cpp-python -d "$sdist" "$llama_pin"
  mkdir -p "$gbnf_dir.tmp"
  tar -xzf "$sdist"/llama_cpp_python-*.tar.gz -C "$gbnf_dir.tmp" --strip-components=4 \
    --wildcards '*/vendor/llama.cpp/grammars/*.gbnf'
  mv "$gbnf_dir.tmp" "$gbnf_dir"
  rm -rf "$sdist"
fi
export STENCIL_GBNF_DIR="$gbnf_dir"
export STENCIL_MODEL="$(scripts/fetch-model.sh)"
export STENCIL_BIN="${STENCIL_BIN:-$root/target/debug/stencil}"
export STENCIL_PY_STRICT=1
cd crates/stencil-python/tests
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
