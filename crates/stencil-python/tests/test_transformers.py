"""Real generations through transformers' generate() (CPU torch) with SmolLM2 loaded from
the default model's GGUF: five corpus schemas and a regex, sampled at temperature 1.0, every
output valid and complete."""

import json
import os
import re

import pytest

from conftest import GEN_REGEX, GEN_SCHEMAS, corpus_schema, need

MAX_NEW = 160


@pytest.fixture(scope="module")
def hf(model_path):
    need("torch")
    transformers = need("transformers")
    folder, name = os.path.split(model_path)
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    model.eval()
    return tok, model


def generate(hf, processor, ask, seed):
    import torch

    tok, model = hf
    prompt = tok.apply_chat_template([{"role": "user", "content": ask}], tokenize=False, add_generation_prompt=True)
    enc = tok(prompt, return_tensors="pt")
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**enc, logits_processor=[processor], max_new_tokens=MAX_NEW, do_sample=True,
                             temperature=1.0, top_k=0, top_p=1.0, pad_token_id=tok.eos_token_id)
    return tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


@pytest.mark.parametrize("name", GEN_SCHEMAS)
def test_generate_under_schema(hf, name):
    jsonschema = need("jsonschema")
    from stencil.hf import JsonSchemaLogitsProcessor

    tok, model = hf
    schema = corpus_schema(name)
    proc = JsonSchemaLogitsProcessor(schema, tok, vocab_size=model.config.vocab_size, max_tokens=MAX_NEW)
    text = generate(hf, proc, f"{schema.get('description', '')} Produce a realistic example as JSON.", seed=1)
    jsonschema.validate(json.loads(text), schema)


def test_generate_under_regex_in_a_batch(hf):
    from stencil.hf import RegexLogitsProcessor
    import torch

    tok, model = hf
    proc = RegexLogitsProcessor(GEN_REGEX, tok, vocab_size=model.config.vocab_size, max_tokens=20)
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"Give a date in {y}."}], tokenize=False,
                                       add_generation_prompt=True) for y in ("1990", "2021")]
    tok.padding_side = "left"
    enc = tok(prompts, return_tensors="pt", padding=True)
    torch.manual_seed(2)
    with torch.no_grad():
        out = model.generate(**enc, logits_processor=[proc], max_new_tokens=20, do_sample=True, temperature=1.0,
                             pad_token_id=tok.eos_token_id)
    for row in out[:, enc["input_ids"].shape[1]:]:
        text = tok.decode(row, skip_special_tokens=True)
        assert re.fullmatch(GEN_REGEX, text), text
    assert len(proc.matchers) == 2


def test_processor_refuses_a_changed_batch(hf):
    import torch

    from stencil.hf import ChoiceLogitsProcessor

    tok, model = hf
    proc = ChoiceLogitsProcessor(["yes", "no"], tok, vocab_size=model.config.vocab_size)
    scores = torch.zeros(1, model.config.vocab_size)
    proc(torch.tensor([[1, 2]]), scores)
    with pytest.raises(ValueError, match="reset"):
        proc(torch.tensor([[1, 2, 3], [1, 2, 3]]), torch.zeros(2, model.config.vocab_size))
