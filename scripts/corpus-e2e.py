#!/usr/bin/env python3
"""Generate under every schema of schemas/maskbench-e2e.json with the `stencil` CLI, as a user
would: `stencil generate --json-schema S --prompt "Produce a realistic example instance."`,
greedy and at temperature 1.0 with seeds 1 and 2. Writes one JSON line per generation
(schema, run, output, finish_reason, completion tokens and, where the binary reports them,
closed_by_budget and loop_guard_hits) for `cargo run -p stencil-runtime --example
validate_outputs` to check with the `jsonschema` crate.

usage: scripts/corpus-e2e.py --stencil target/release/stencil --max-tokens 300 --out FILE
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = [("greedy", ["--temperature", "0"]),
        ("seed1", ["--temperature", "1", "--seed", "1"]),
        ("seed2", ["--temperature", "1", "--seed", "2"])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stencil", required=True)
    ap.add_argument("--max-tokens", type=int, default=300)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench"))
    args = ap.parse_args()
    corpus = json.load(open(os.path.join(ROOT, "schemas", "maskbench-e2e.json")))
    if not os.path.isdir(args.data):
        sys.exit(f"corpus-e2e: {args.data} not found (needs ../shared/data)")
    with open(args.out, "w") as out, tempfile.TemporaryDirectory() as tmp:
        for rel in corpus["schemas"]:
            schema = json.load(open(os.path.join(args.data, rel)))["schema"]
            path = os.path.join(tmp, "schema.json")
            json.dump(schema, open(path, "w"))
            for name, flags in RUNS:
                cmd = [args.stencil, "generate", "--json-schema", path,
                       "--prompt", "Produce a realistic example instance.",
                       "--max-tokens", str(args.max_tokens)] + flags
                p = subprocess.run(cmd, capture_output=True, text=True)
                err = p.stderr
                row = {"schema": rel, "run": name, "exit": p.returncode, "output": p.stdout}
                m = re.search(r"finish_reason=(\w+)", err)
                row["finish_reason"] = m.group(1) if m else None
                for key in ["completion_tokens", "loop_guard_hits"]:
                    m = re.search(key + r"=(\d+)", err)
                    row[key] = int(m.group(1)) if m else None
                m = re.search(r"closed_by_budget=(\w+)", err)
                row["closed_by_budget"] = (m.group(1) == "true") if m else None
                if p.returncode != 0:
                    row["error"] = err.strip().splitlines()[-1] if err.strip() else ""
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"{rel} {name}: {row['finish_reason']} {row.get('completion_tokens')}"
                      f" {row.get('error', '')}", file=sys.stderr)


if __name__ == "__main__":
    main()
