#!/usr/bin/env bash
# Starts `stencil serve` on a free loopback port and drives it with the official `openai`
# Python package (installed with pip into a virtualenv under target/), then with 16 concurrent
# streaming clients (`stencil bench load`). Needs a built
# `stencil` binary (cargo test builds target/debug/stencil) and the default model.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if ! command -v python3 >/dev/null; then
  echo "NOTICE: python3 not found; skipping the openai client test" >&2
  exit 0
fi
venv="$root/target/py-openai"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "openai>=1.40"
fi
bin="${STENCIL_BIN:-$root/target/debug/stencil}"
[ -x "$bin" ] || cargo build -p stencil-cli
log="$(mktemp)"
"$bin" serve --port 0 --api-key test-key --model "$(scripts/fetch-model.sh)" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 600); do
  url="$(grep -o 'http://[0-9.:]*' "$log" | head -1 || true)"
  [ -n "$url" ] && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "server did not start" >&2; cat "$log" >&2; exit 1; }
"$venv/bin/python" scripts/openai-client-test.py "$url"
# 16 concurrent streaming clients (continuous batching): every stream complete and well formed,
# then the same under JSON Schemas, every answer valid. Bounded: 32 short requests each.
"$bin" bench load --url "$url" --api-key test-key --clients 16 --requests 32 --max-tokens 16
"$bin" bench load --url "$url" --api-key test-key --clients 16 --requests 32 --max-tokens 48 \
  --json-schema schemas/corpus/person.json --json-schema schemas/corpus/measurement.json
kill -TERM $pid
wait $pid
grep -q "stopped" "$log" || { echo "server did not shut down cleanly on SIGTERM" >&2; cat "$log" >&2; exit 1; }
echo "server shut down cleanly on SIGTERM"
