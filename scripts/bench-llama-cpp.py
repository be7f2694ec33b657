#!/usr/bin/env python3
"""The llama.cpp yardstick for `stencil bench`: prompt tok/s and greedy decode ms/token on the
same GGUF, the same prompt text and lengths, through llama-cpp-python (a source build; see
scripts/bench-llama-cpp.sh). Prints one JSON line shaped like `stencil bench`'s.

    target/py-llama/bin/python scripts/bench-llama-cpp.py --model M.gguf --prompt-tokens 256 \\
        --decode-tokens 32 --context 16 --context 256 --context 1024
"""

import argparse
import json
import os
import statistics
import time

import numpy as np
from llama_cpp import Llama, __version__

# The same text `stencil bench` repeats (crates/stencil-cli/src/bench.rs, BENCH_TEXT).
BENCH_TEXT = "The quick brown fox jumps over the lazy dog. "


def last_argmax(llm: Llama) -> int:
    # The logits of the last evaluated token (llama.cpp keeps only those without logits_all).
    return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))))


def greedy_decode_ms(llm: Llama, steps: int) -> float:
    nxt = last_argmax(llm)
    t = time.perf_counter()
    for _ in range(steps):
        llm.eval([nxt])
        nxt = last_argmax(llm)
    return (time.perf_counter() - t) * 1e3 / max(steps, 1)


def perplexity(llm: Llama, ids: list) -> float:
    """exp of the mean negative log-likelihood of ids[1:], one token per eval (as `stencil
    bench --perplexity` does)."""
    llm.reset()
    llm._ctx.kv_cache_clear()
    nll = 0.0
    for cur, nxt in zip(ids, ids[1:]):
        llm.eval([cur])
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float64)
        m = logits.max()
        nll += m + np.log(np.exp(logits - m).sum()) - logits[nxt]
    return float(np.exp(nll / (len(ids) - 1)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--context", type=int, action="append", default=[])
    p.add_argument("--perplexity", help="also report the perplexity of this text file")
    p.add_argument("--perplexity-tokens", type=int, default=512)
    a = p.parse_args()
    longest = max([a.prompt_tokens, a.perplexity_tokens if a.perplexity else 0] + a.context)
    t0 = time.perf_counter()
    llm = Llama(model_path=a.model, n_ctx=longest + a.decode_tokens + 16, n_batch=512, n_threads=a.threads,
                n_threads_batch=a.threads, verbose=False)
    load_s = time.perf_counter() - t0
    tokens = llm.tokenize((BENCH_TEXT * (longest // 8 + 2)).encode(), add_bos=True)[:longest]
    prompt = tokens[: a.prompt_tokens]
    prompt_tps, decode = [], []
    for _ in range(max(a.runs, 1)):
        llm.reset()
        llm._ctx.kv_cache_clear()
        t = time.perf_counter()
        llm.eval(prompt)
        prompt_tps.append(len(prompt) / (time.perf_counter() - t))
        decode.append(greedy_decode_ms(llm, a.decode_tokens))
    at_context = {}
    for n in a.context:
        runs = []
        for _ in range(max(a.runs, 1)):
            llm.reset()
            llm._ctx.kv_cache_clear()
            llm.eval(tokens[:n])
            runs.append(greedy_decode_ms(llm, a.decode_tokens))
        at_context[str(n)] = round(statistics.median(runs), 2)
    out = {
        "engine": f"llama.cpp (llama-cpp-python {__version__})",
        "model": os.path.basename(a.model),
        "threads": a.threads,
        "prompt_tokens": len(prompt),
        "prompt_tok_per_s": round(statistics.median(prompt_tps), 1),
        "decode_tokens": a.decode_tokens,
        "decode_ms_per_token": round(statistics.median(decode), 2),
        "load_s": round(load_s, 2),
    }
    if at_context:
        out["decode_ms_at_context"] = at_context
    if a.perplexity:
        with open(a.perplexity, encoding="utf-8") as f:
            ids = llm.tokenize(f.read().encode(), add_bos=True)[: a.perplexity_tokens]
        out["perplexity_tokens"] = len(ids)
        out["perplexity"] = round(perplexity(llm, ids), 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
