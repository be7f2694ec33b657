#!/usr/bin/env bash
# Starts `stencil serve` on a free loopback port and drives it with the official client
# packages (scripts/api-clients-requirements.txt, installed with pip into a virtualenv under
# target/): `openai` (Chat Completions, then the Responses API), `anthropic` (Messages) and
# `ollama`; then with 16 concurrent streaming clients (`stencil bench load`). Needs a built
# `stencil` binary (cargo test builds target/debug/stencil) and the default model.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if ! command -v python3 >/dev/null; then
  echo "NOTICE: python3 not found; skipping the API client tests" >&2
  exit 0
fi
venv="$root/target/py-api-clients"
reqs="$root/scripts/api-clients-requirements.txt"
stamp="$venv/requirements.sha256"
want="$(sha256sum "$reqs" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$reqs"
  echo "$want" > "$stamp"
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
"$venv/bin/python" scripts/api-clients-test.py "$url" test-key
# 16 concurrent streaming clients (continuous batching): every stream complete and well formed,
# then the same under JSON Schemas, every answer valid. Bounded: 32 short requests each.
"$bin" bench load --url "$url" --api-key test-key --clients 16 --requests 32 --max-tokens 16
"$bin" bench load --url "$url" --api-key test-key --clients 16 --requests 32 --max-tokens 48 \
  --json-schema schemas/corpus/person.json --json-schema schemas/corpus/measurement.json
kill -TERM $pid
wait $pid
grep -q "stopped" "$log" || { echo "server did not shut down cleanly on SIGTERM" >&2; cat "$log" >&2; exit 1; }
echo "server shut down cleanly on SIGTERM"
