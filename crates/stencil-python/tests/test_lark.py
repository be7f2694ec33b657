"""Lark grammars: every `.lark` file of schemas/grammars/ compiles, and three sampled
generations of the default model under each, through `stencil.llama_cpp.LarkLogitsProcessor`,
end complete and are accepted by Lark itself (the `lark` package, Earley parser with its
dynamic lexer). A `%json { schema }` embed is checked in two parts: Lark parses it as any JSON
value (a JSON grammar written in Lark in its place), and the value it covers must satisfy the
schema under the `jsonschema` validator."""

import json
import pathlib
import re

import pytest

import stencil
from conftest import ROOT, need

MAX_TOKENS = 96
GRAMMARS = sorted((ROOT / "schemas" / "grammars").glob("*.lark"))

# Any JSON value with explicit whitespace, for Lark; one `json_value_K` rule per embed so the
# value each covers can be found in the tree.
JSON_RULES = r"""
_jv: _jobj | _jarr | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
_jobj: "{" _JWS? "}" | "{" _JWS? _jpair (_JWS? "," _JWS? _jpair)* _JWS? "}"
_jpair: ESCAPED_STRING _JWS? ":" _JWS? _jv
_jarr: "[" _JWS? "]" | "[" _JWS? _jv (_JWS? "," _JWS? _jv)* _JWS? "]"
_JWS: /[ \t\n\r]+/
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
"""


def split_json_embeds(grammar: str):
    """The grammar with each `%json { schema }` replaced by a rule for any JSON value, and the
    schemas in order."""
    out, schemas, pos = [], [], 0
    decoder = json.JSONDecoder()
    for m in re.finditer(r"%json\s*", grammar):
        if m.start() < pos:
            continue
        schema, end = decoder.raw_decode(grammar, m.end())
        out.append(grammar[pos:m.start()] + f"json_value_{len(schemas)}")
        schemas.append(schema)
        pos = end
    out.append(grammar[pos:])
    text = "".join(out)
    if schemas:
        text += JSON_RULES + "".join(f"json_value_{k}: _jv\n" for k in range(len(schemas)))
    return text, schemas


def lark_accepts(grammar: str, text: str):
    """Whether Lark parses `text` under `grammar` and every embedded JSON value satisfies its
    schema; (verdict, reason)."""
    lark = need("lark")
    jsonschema = need("jsonschema")
    plain, schemas = split_json_embeds(grammar)
    parser = lark.Lark(plain, start="start", parser="earley", lexer="dynamic", propagate_positions=True)
    try:
        tree = parser.parse(text)
    except lark.exceptions.LarkError as e:
        return False, f"Lark rejects it: {e}"
    for k, schema in enumerate(schemas):
        for node in tree.find_data(f"json_value_{k}"):
            value = json.loads(text[node.meta.start_pos:node.meta.end_pos])
            errors = list(jsonschema.Draft202012Validator(schema).iter_errors(value))
            if errors:
                return False, f"embed {k}: {errors[0].message}"
    return True, ""


@pytest.fixture(scope="module")
def llm(model_path):
    llama_cpp = need("llama_cpp")
    return llama_cpp.Llama(model_path=model_path, n_ctx=1024, n_threads=2, verbose=False, seed=1)


def test_the_grammar_set_is_there():
    assert len(GRAMMARS) >= 6, GRAMMARS
    assert sum("%json" in g.read_text() for g in GRAMMARS) >= 3


def test_the_acceptance_check_can_refuse():
    grammar = (ROOT / "schemas" / "grammars" / "answer.lark").read_text()
    assert lark_accepts(grammar, 'Answer: {"city": "Oslo", "population": 700000}\nConfidence: high')[0]
    # A bad frame, and a value outside its schema.
    assert not lark_accepts(grammar, 'Answer: {"city": "Oslo", "population": 7}\nConfidence: huge')[0]
    ok, why = lark_accepts(grammar, 'Answer: {"city": "Oslo", "population": -7}\nConfidence: low')
    assert not ok and "embed 0" in why, why


@pytest.mark.parametrize("path", GRAMMARS, ids=lambda p: p.name)
def test_generations_are_accepted_by_lark(llm, path):
    from llama_cpp import LogitsProcessorList
    from stencil.llama_cpp import LarkLogitsProcessor

    grammar = path.read_text()
    for seed in (1, 2, 3):
        processor = LarkLogitsProcessor(grammar, llm, max_tokens=MAX_TOKENS)
        out = llm.create_chat_completion(
            messages=[{"role": "user", "content": f"Write an example of {path.stem.replace('_', ' ')}."}],
            max_tokens=MAX_TOKENS, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed,
            logits_processor=LogitsProcessorList([processor]))
        choice = out["choices"][0]
        text = choice["message"]["content"]
        assert choice["finish_reason"] == "stop", (path.name, seed, text)
        ok, why = lark_accepts(grammar, text)
        assert ok, (path.name, seed, text, why)
        print(f"{path.name} seed {seed}: {text[:60]!r}")


def test_grammar_errors_name_the_line(tok):
    with pytest.raises(stencil.SchemaError, match="Lark grammar, line 2: rule `a` is left-recursive"):
        stencil.Constraint.lark('start: a\na: b "x" | "y"\nb: a\n', tok)
    with pytest.raises(stencil.SchemaError, match="line 1: %json schema: invalid JSON Schema"):
        stencil.Constraint.lark('start: %json {"type": "strung"}\n', tok)
