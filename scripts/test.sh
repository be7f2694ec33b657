#!/usr/bin/env bash
# Runs the whole test suite: fetches what the tests need (the default model), then cargo test.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/fetch-model.sh >/dev/null
cargo test --workspace --all-targets "$@"
# The server driven by the official `openai` Python client (pip into a virtualenv).
scripts/openai-client-test.sh
