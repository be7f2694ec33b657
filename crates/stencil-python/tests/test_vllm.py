"""The vLLM adapter: its pure-Python core (slot-recycled persistent batch, rows reordered
every step) driven like vLLM's model runner V2 drives a custom logits processor, and, where
the `vllm` package imports, vLLM's own interface classes, loader and params validator.

vLLM's engine itself cannot run here: its wheels are built for CUDA (no GPU on this machine),
and its dependency tree includes llguidance, XGrammar and outlines-core, which never enter
stencil's. The script installs the vllm wheel without dependencies, so the interface module
(import-light by design) and the loader are the real ones."""

import json
import random
import re
import types

import numpy as np
import pytest

import stencil
from conftest import GEN_REGEX, SHARED, SMOLLM2_EOS, corpus_schema, need
from stencil import vllm as sv

PAD = 64  # vLLM pads the logits width past the tokenizer


def test_parse_spec_names_what_is_wrong():
    assert sv.parse_spec(None) is None and sv.parse_spec({"other": 1}) is None
    assert sv.parse_spec({"stencil": '{"regex": "a+"}'})["kind"] == "regex"
    s = sv.parse_spec({"stencil": {"json_schema": '{"type": "integer"}'}})
    assert s["value"] == {"type": "integer"}
    for bad, msg in [
        ({"stencil": "{"}, "not valid JSON"),
        ({"stencil": []}, "must be an object"),
        ({"stencil": {}}, "exactly one of"),
        ({"stencil": {"regex": "a", "choice": ["a"]}}, "exactly one of"),
        ({"stencil": {"regex": 5}}, "must be a string"),
        ({"stencil": {"choice": []}}, "non-empty list"),
        ({"stencil": {"json_object": 1}}, "must be true"),
        ({"stencil": {"regex": "a", "bogus": 1}}, "unknown keys"),
    ]:
        with pytest.raises(ValueError, match=msg):
            sv.parse_spec(bad)


def test_check_spec_fails_at_admission_with_the_pointer():
    sv.check_spec(sv.parse_spec({"stencil": {"json_schema": corpus_schema("order")}}))
    with pytest.raises(stencil.SchemaError) as e:
        sv.check_spec(sv.parse_spec({"stencil": {"json_schema": {"properties": {"a": {"$ref": "#/nope"}}}}}))
    assert e.value.pointer == "#/properties/a"


class FakeRunner:
    """What vLLM's model runner keeps per slot, in plain tensors: committed tokens, prompt
    lengths; each step it builds the rows (shuffled), and after sampling appends one token."""

    def __init__(self, max_reqs, max_len, vocab_size):
        import torch

        self.all_token_ids = torch.zeros(max_reqs, max_len, dtype=torch.int32)
        self.prompt_len = np.zeros(max_reqs, dtype=np.int32)
        self.total_len = np.zeros(max_reqs, dtype=np.int32)
        self.vocab_size = vocab_size
        self.max_reqs = max_reqs

    def admit(self, slot, prompt):
        import torch

        self.all_token_ids[slot, : len(prompt)] = torch.tensor(prompt, dtype=torch.int32)
        self.prompt_len[slot] = self.total_len[slot] = len(prompt)

    def rows(self, slots, rng):
        order = list(slots)
        rng.shuffle(order)
        pos = [int(self.total_len[s]) - 1 for s in order]
        fed = [int(self.all_token_ids[s, p]) for s, p in zip(order, pos)]
        return order, pos, fed


def run_batch(apply, runner, requests, rng, steps=200):
    """Drives `apply(logits, slots, pos, fed)` over random logits: a request occupies a slot
    until it samples end-of-sequence or reaches max_tokens, then the next request takes the
    slot. Returns each request's output token ids."""
    import torch

    pending = list(enumerate(requests))
    active = {}  # slot -> (request index, max_tokens, output)
    outputs = {}
    free = list(range(runner.max_reqs))
    for _ in range(steps):
        while pending and free:
            slot = free.pop()
            i, (spec, max_tokens, prompt, admit) = pending.pop(0)
            runner.admit(slot, prompt)
            admit(slot, spec, max_tokens)
            active[slot] = (i, max_tokens, [])
        if not active:
            break
        slots, pos, fed = runner.rows(active, rng)
        logits = torch.randn(len(slots), runner.vocab_size) * 4
        logits = apply(logits, slots, pos, fed)
        for row, slot in enumerate(slots):
            probs = torch.softmax(logits[row], -1)
            t = int(torch.multinomial(probs, 1))
            i, max_tokens, out = active[slot]
            out.append(t)
            runner.all_token_ids[slot, runner.total_len[slot]] = t
            runner.total_len[slot] += 1
            if t == SMOLLM2_EOS or len(out) >= max_tokens:
                outputs[i] = out
                del active[slot]
                free.append(slot)
    assert not pending and not active, "requests left unfinished"
    return [outputs[i] for i in range(len(requests))]


def check_outputs(tok, requests, outputs):
    jsonschema = need("jsonschema")
    for (spec, _, _, _), out in zip(requests, outputs):
        if spec is None:
            continue
        assert SMOLLM2_EOS in out, "a constrained request ended by length, not by end-of-sequence"
        text = b"".join(tok.token_bytes(t) for t in out if t != SMOLLM2_EOS).decode("utf-8")
        kind, value = spec["kind"], spec["value"]
        if kind == "json_schema":
            jsonschema.validate(json.loads(text), value)
        elif kind == "regex":
            assert re.fullmatch(value, text), text
        elif kind == "choice":
            assert text in value


def make_requests(tok, admit):
    specs = [
        {"json_schema": corpus_schema("person")},
        {"regex": GEN_REGEX},
        None,
        {"choice": ["alpha", "beta", "gamma"]},
        {"json_schema": corpus_schema("measurement"), "options": {"whitespace": "compact"}},
        {"json_object": True},
        {"json_schema": corpus_schema("person")},  # same schema again: compiled once
    ]
    reqs = []
    for k, s in enumerate(specs):
        spec = sv.parse_spec({"stencil": s}) if s else None
        prompt = tok.encode("request number %d, please answer" % k)[: 3 + k]
        reqs.append((spec, 120 if spec else 15, prompt, admit))
    return reqs


def test_core_over_a_recycled_shuffled_batch(tok):
    torch = need("torch")
    tok_padded = stencil.Tokenizer.from_file(str(SHARED / "tokenizers" / "smollm2-135m-instruct" / "tokenizer.json"),
                                             eos_ids=[SMOLLM2_EOS], vocab_size=tok.vocab_size + PAD)
    batch = sv.StencilBatch(tok_padded, max_slots=3)
    runner = FakeRunner(3, 512, tok.vocab_size + PAD)

    def apply(logits, slots, pos, fed):
        def history(slot, a, b):
            p = int(runner.prompt_len[slot])
            return runner.all_token_ids[slot, p + a : p + b].tolist()

        return batch.apply(logits, np.array(slots), np.zeros(len(slots), dtype=np.int64), np.array(pos),
                           np.array(fed), lambda s: int(runner.prompt_len[s]), history)

    reqs = make_requests(tok, lambda slot, spec, mt: batch.add(slot, spec, mt))
    outputs = run_batch(apply, runner, reqs, random.Random(4))
    check_outputs(tok, reqs, outputs)
    assert len(batch._cache) == 5  # six constrained requests, one schema twice
    # Padding columns are never sampled for constrained rows.
    assert all(t < tok.vocab_size for (spec, *_), out in zip(reqs, outputs) if spec for t in out)
    with pytest.raises(RuntimeError, match="speculative decoding"):
        batch.add(0, sv.parse_spec({"stencil": {"regex": "a"}}), 5)
        batch.apply(torch.zeros(1, runner.vocab_size), np.array([0]), np.array([1]), np.array([3]), np.array([1]),
                    lambda s: 3, lambda s, a, b: [])


def test_real_vllm_interface(tok, tmp_path):
    need("torch")
    if sv._VllmLogitsProcessor is None:
        if __import__("os").environ.get("STENCIL_PY_STRICT") == "1":
            pytest.fail("vllm's logits-processor interface does not import")
        pytest.skip("vllm is not installed")
    import shutil

    import torch
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState
    from vllm.v1.worker.gpu.sample.logits_processor.loader import (
        _load_v2_logitsprocs_by_fqcns,
        build_custom_logits_processors_params_validator,
    )

    [cls] = _load_v2_logitsprocs_by_fqcns(["stencil.vllm:StencilLogitsProcessor"])
    assert cls is sv.StencilLogitsProcessor
    validate = build_custom_logits_processors_params_validator(["stencil.vllm:StencilLogitsProcessor"])
    validate(types.SimpleNamespace(extra_args={"stencil": {"regex": "[0-9]+"}}, max_tokens=5))
    validate(types.SimpleNamespace(extra_args=None, max_tokens=5))
    with pytest.raises(Exception, match=r"#/properties/a"):
        validate(types.SimpleNamespace(extra_args={"stencil": {"json_schema": {"properties": {"a": {"$ref": "#/x"}}}}}))

    # A model folder as vLLM sees it: tokenizer.json + tokenizer_config.json.
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    shutil.copy(SHARED / "tokenizers" / "smollm2-135m-instruct" / "tokenizer.json", model_dir / "tokenizer.json")
    (model_dir / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    vocab = tok.vocab_size + PAD
    runner = FakeRunner(3, 512, vocab)
    prompt_len = types.SimpleNamespace(np=runner.prompt_len)  # a UvaBackedTensor's host side
    all_ids = types.SimpleNamespace(gpu=runner.all_token_ids)  # a StagedWriteTensor's device side
    state = LogitsProcRequestState(device=torch.device("cpu"), max_num_reqs=3, vocab_size=vocab,
                                   all_token_ids=all_ids, prompt_len=prompt_len, prefill_len=prompt_len,
                                   total_len=types.SimpleNamespace(np=runner.total_len))
    config = types.SimpleNamespace(model_config=types.SimpleNamespace(model=str(model_dir), tokenizer=str(model_dir)))
    proc = cls(config, state)
    assert proc.batch.tokenizer.eos_ids == [SMOLLM2_EOS]

    def admit(slot, spec, max_tokens):
        extra = None if spec is None else {"stencil": {spec["kind"]: spec["value"], "options": spec["options"]}}
        return proc.add_request(slot, types.SimpleNamespace(extra_args=extra, max_tokens=max_tokens))

    def apply(logits, slots, pos, fed):
        n = len(slots)
        ctx = LogitsContext(expanded_idx_mapping=torch.tensor(slots), idx_mapping=torch.tensor(slots),
                            idx_mapping_np=np.array(slots), expanded_local_pos=torch.zeros(n, dtype=torch.int64),
                            input_ids=torch.tensor(fed), pos=torch.tensor(pos),
                            seq_lens_upper_bound_np=np.array(pos) + 1)
        return proc.apply(logits, ctx)

    reqs = make_requests(tok, admit)
    outputs = run_batch(apply, runner, reqs, random.Random(9))
    check_outputs(tok, reqs, outputs)
