"""MaskBench through the Python package: the protocol and JSON line of
``stencil bench maskbench`` (and ``../shared/tools/maskbench-llg``), timing what a Python
caller pays per mask: ``Matcher.fill_next_token_bitmask`` into a numpy bitmask.

    python -m stencil.maskbench --tokenizer tokenizer.json --data DIR [--data DIR...]

For each schema file: compile (schema order, the defaults of ``stencil bench maskbench``),
then replay every test instance token by token: fill the mask, check the next token is in
it, accept it; a valid instance must end accepting, an invalid one must be refused.
``--dump-check FILE`` compares every mask with the ones ``stencil bench maskbench
--dump-masks FILE`` wrote (same files, same order) instead of timing.
"""

import argparse
import json
import math
import os
import sys
import time
from typing import List, Optional

import numpy as np

import stencil


def _files(dirs: List[str], limit: Optional[int]) -> List[str]:
    out = []
    for d in dirs:
        if os.path.isfile(d):
            out.append(d)
            continue
        found = []
        for root, _, names in os.walk(d):
            found += [os.path.join(root, n) for n in names if n.endswith(".json")]
        found.sort()
        out += found[:limit] if limit is not None else found
    return out


def _pct(sorted_values: List[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    rank = math.ceil(q * len(sorted_values))
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


def _summary(values: List[float], with_count: bool) -> dict:
    v = sorted(values)
    out = {"count": len(v)} if with_count else {}
    for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)):
        out[k] = round(_pct(v, q), 3)
    out["mean"] = round(sum(v) / max(len(v), 1), 3)
    return out


def _instance_text(value) -> str:
    # serde_json's compact form, which the Rust runner tokenizes.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def run(tokenizer_path: str, data: List[str], limit: Optional[int] = None) -> dict:
    start = time.perf_counter()
    files = _files(data, limit)
    tok = stencil.Tokenizer.from_file(tokenizer_path, eos_ids=[])
    bitmask = stencil.allocate_token_bitmask(1, tok.vocab_size)
    compile_us, mask_us = [], []
    totals = dict(files=0, compiled=0, passing=0, valid=0, valid_accepted=0, invalid=0, invalid_rejected=0)
    for path in files:
        totals["files"] += 1
        with open(path, encoding="utf-8") as f:
            file = json.load(f)
        tests = [(bool(t.get("valid")), tok.encode(_instance_text(t["data"]))) for t in file.get("tests", [])]
        n_valid = sum(1 for v, _ in tests if v)
        totals["valid"] += n_valid
        totals["invalid"] += len(tests) - n_valid
        t0 = time.perf_counter()
        try:
            c = _compile(tok, file["schema"])
            c.matcher().fill_next_token_bitmask(bitmask)
        except stencil.StencilError:
            continue
        compile_us.append((time.perf_counter() - t0) * 1e6)
        totals["compiled"] += 1
        failed = 0
        for idx, (valid, ids) in enumerate(tests):
            m = c.matcher()
            ok = True
            for i, t in enumerate(ids):
                t1 = time.perf_counter()
                m.fill_next_token_bitmask(bitmask)
                mask_us.append((time.perf_counter() - t1) * 1e6)
                if not (bitmask[0, t >> 5] >> (t & 31)) & 1 or not m.accept_token(t):
                    ok = False
                    break
            accepted = ok and m.is_accepting()
            del m  # back to the pool before the next matcher leases a cache
            if accepted == valid:
                totals["valid_accepted" if valid else "invalid_rejected"] += 1
            else:
                failed += 1
        totals["passing"] += failed == 0
        del c  # freed here, not inside the next schema's compile time
    wall = time.perf_counter() - start
    out = {
        "engine": f"stencil-python {stencil.__version__}",
        "tokenizer": os.path.basename(os.path.dirname(os.path.abspath(tokenizer_path))),
        "vocab": tok.vocab_size,
        "files": totals["files"],
        "compiled": totals["compiled"],
        "passing": totals["passing"],
        "tests": {k: totals[k] for k in ("valid", "valid_accepted", "invalid", "invalid_rejected")},
        "compile_us": _summary(compile_us, False),
        "masks_per_s": round(len(mask_us) / wall),
        "mask_us": _summary(mask_us, True),
        "wall_s": round(wall, 3),
    }
    return out


def _compile(tok, schema):
    # The options of `stencil bench maskbench`: the compiler's defaults.
    return stencil.Constraint.json_schema(schema, tok, plain_integers=False, max_recursion=None)


def check_dump(tokenizer_path: str, data: List[str], limit: Optional[int], dump_path: str) -> dict:
    """Replays the tokens of a `stencil bench maskbench --dump-masks` file through the
    package and compares every mask; raises AssertionError at the first difference."""
    tok = stencil.Tokenizer.from_file(tokenizer_path, eos_ids=[])
    bitmask = stencil.allocate_token_bitmask(1, tok.vocab_size)
    words = bitmask.shape[1]
    dump = np.fromfile(dump_path, dtype="<u4")
    at, schemas, masks = 0, 0, 0

    def take(n):
        nonlocal at
        if at + n > len(dump):
            raise AssertionError("the dump ends early")
        at += n
        return dump[at - n : at]

    for path in _files(data, limit):
        with open(path, encoding="utf-8") as f:
            file = json.load(f)
        count = int(take(1)[0])
        try:
            # Compiled means compiled and a first mask computed, as `stencil bench maskbench`.
            c = _compile(tok, file["schema"])
            c.matcher().fill_next_token_bitmask(bitmask)
        except stencil.StencilError as e:
            if count == 0xFFFFFFFF:
                continue
            raise AssertionError(f"{path}: Rust compiled it, Python did not: {e}")
        if count == 0xFFFFFFFF:
            raise AssertionError(f"{path}: Python compiled it, Rust did not")
        schemas += 1
        for idx in range(count):
            m = c.matcher()
            for step in range(int(take(1)[0])):
                t = int(take(1)[0])
                want = take(words).view("<i4")
                m.fill_next_token_bitmask(bitmask)
                if not np.array_equal(bitmask[0], want):
                    diff = np.nonzero(stencil.unpack_bitmask(bitmask[0], tok.vocab_size) != stencil.unpack_bitmask(want, tok.vocab_size))[0]
                    raise AssertionError(f"{path} test #{idx} step #{step}: masks differ at token ids {diff[:10].tolist()}")
                masks += 1
                if not m.accept_token(t):
                    break
            del m
    if at != len(dump):
        raise AssertionError(f"the dump has {len(dump) - at} words Python never read")
    return {"schemas": schemas, "masks_compared": masks}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m stencil.maskbench", description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True, help="tokenizer.json")
    p.add_argument("--data", action="append", required=True, help="MaskBench folder (recursive) or file")
    p.add_argument("--limit", type=int, help="only the first N files (sorted) of each --data folder")
    p.add_argument("--dump-check", help="compare masks with a `stencil bench maskbench --dump-masks` file")
    a = p.parse_args(argv)
    if a.dump_check:
        print(json.dumps(check_dump(a.tokenizer, a.data, a.limit, a.dump_check)))
    else:
        print(json.dumps(run(a.tokenizer, a.data, a.limit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
