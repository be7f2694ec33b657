#!/usr/bin/env bash
# Runs the whole test suite: fetches what the tests need (the default model), then the unit,
# integration and doc tests, the documentation build (no broken or private intra-doc links),
# the official `openai` client against the server, and the Python package's tests. Fails if
# the run changed the tree.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

# What the tree looks like before: a test run must leave it exactly so (baselines are only
# rewritten with STENCIL_UPDATE_BASELINES=1, never by a plain run).
tree_state() {
  git status --porcelain 2>/dev/null || true
  git diff 2>/dev/null | sha256sum
}
before="$(tree_state)"

scripts/fetch-model.sh >/dev/null
cargo test --workspace --all-targets "$@"
cargo test --workspace --doc "$@"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# The server driven by the official `openai`, `anthropic` and `ollama` Python clients (pip into
# a virtualenv): Chat Completions, Responses, Messages, Ollama chat/generate.
scripts/api-clients-test.sh
# The Python package (maturin build into a virtualenv) and its transformers,
# llama-cpp-python and vLLM adapters.
scripts/python-test.sh

after="$(tree_state)"
if [ "$before" != "$after" ]; then
  echo "ERROR: the test run changed the working tree:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  exit 1
fi
echo "all tests passed; the working tree is unchanged"
