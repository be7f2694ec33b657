#!/usr/bin/env bash
# Quick start: fetch the default model, build the CLI (release), and run a generation.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v cargo >/dev/null 2>&1 || { echo "quickstart: cargo is not installed (https://rustup.rs)" >&2; exit 1; }
model="$(scripts/fetch-model.sh)"
cargo build --release -p stencil-cli
./target/release/stencil generate --model "$model" \
  --prompt "${1:-What is the capital of France? Answer in one sentence.}" --max-tokens 64
