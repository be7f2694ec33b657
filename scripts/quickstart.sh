#!/usr/bin/env bash
# Quick start: fetch the default model, build the CLI (release), and run a generation.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cargo >/dev/null 2>&1 || { echo "quickstart: cargo is not installed (https://rustup.rs)" >&2; exit 1; }
model="$(scripts/fetch-model.sh)"
cargo build --release -p stencil-cli
# A schema-constrained generation: the output is guaranteed to be JSON valid under the schema.
schema='{"type":"object","properties":{"city":{"type":"string","maxLength":40},"country":{"type":"string","maxLength":40},"population":{"type":"integer","minimum":0}},"required":["city","country","population"],"additionalProperties":false}'
./target/release/stencil generate --model "$model" --json-schema "$schema" \
  --prompt "${1:-Describe the capital of France as JSON.}" --max-tokens 96
echo
