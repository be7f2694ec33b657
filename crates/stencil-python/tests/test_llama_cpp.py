"""Real generations through llama-cpp-python on the default model's GGUF: five corpus
schemas and a regex at temperature 1.0, every output valid and complete; the vocabulary read
from the loaded model matches the tokenizer.json one."""

import json
import re

import numpy as np
import pytest

import stencil
from conftest import GEN_REGEX, GEN_SCHEMAS, corpus_schema, need

MAX_TOKENS = 160


@pytest.fixture(scope="module")
def llm(model_path):
    llama_cpp = need("llama_cpp")
    return llama_cpp.Llama(model_path=model_path, n_ctx=1024, n_threads=2, verbose=False, seed=1)


def chat(llm, processor, ask, seed, max_tokens=MAX_TOKENS):
    from llama_cpp import LogitsProcessorList

    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": ask}], max_tokens=max_tokens, temperature=1.0, top_k=0, top_p=1.0,
        min_p=0.0, seed=seed, logits_processor=LogitsProcessorList([processor]))
    return out["choices"][0]["message"]["content"], out["choices"][0]["finish_reason"]


def test_vocabulary_from_the_model_matches_tokenizer_json(llm, tok):
    import stencil.llama_cpp as sl

    mine = sl.tokenizer_from_llama(llm)
    assert mine.vocab_size == tok.vocab_size
    assert set(tok.eos_ids) <= set(mine.eos_ids)
    # Same masks on a schema walk (the specials differ only in which end the output).
    schema = corpus_schema("person")
    a = stencil.Constraint.json_schema(schema, mine).matcher()
    b = stencil.Constraint.json_schema(schema, tok).matcher()
    ids = tok.encode(json.dumps({"name": "Ann Lee", "age": 31, "email": "ann@example.com"}))
    for t in ids:
        ma, mb = set(a.allowed_tokens()), set(b.allowed_tokens())
        assert ma - set(mine.eos_ids) == mb - set(tok.eos_ids)
        if not (a.accept_token(t) and b.accept_token(t)):
            break


@pytest.mark.parametrize("name", GEN_SCHEMAS)
def test_generate_under_schema(llm, name):
    jsonschema = need("jsonschema")
    import stencil.llama_cpp as sl

    schema = corpus_schema(name)
    for seed in (1, 2):
        proc = sl.JsonSchemaLogitsProcessor(schema, llm, max_tokens=MAX_TOKENS)
        text, finish = chat(llm, proc, f"{schema.get('description', '')} Produce a realistic example as JSON.", seed)
        jsonschema.validate(json.loads(text), schema)
        assert finish in ("stop", "length")


def test_generate_under_regex(llm):
    import stencil.llama_cpp as sl

    for seed in range(3):
        proc = sl.RegexLogitsProcessor(GEN_REGEX, llm, max_tokens=20)
        text, finish = chat(llm, proc, "Give a date.", seed, max_tokens=20)
        assert re.fullmatch(GEN_REGEX, text), text


def test_reused_processor_is_an_error_not_a_wrong_mask(llm):
    import stencil.llama_cpp as sl

    proc = sl.ChoiceLogitsProcessor(["yes", "no"], llm)
    scores = np.zeros(llm.n_vocab(), dtype=np.float32)
    proc(np.array([1, 2, 3], dtype=np.intc), scores)
    assert np.isfinite(scores).sum() == len(proc.matcher.allowed_tokens())
    with pytest.raises(ValueError, match="reset"):
        proc(np.array([1], dtype=np.intc), np.zeros(llm.n_vocab(), dtype=np.float32))
