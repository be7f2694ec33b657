"""The package's API: tokenizers, constraints, matchers, bitmasks, errors."""

import json
import random
import re
import threading

import numpy as np
import pytest

import stencil
from conftest import SMOLLM2_EOS, corpus_schema, need

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def allowed(bitmask_row, vocab_size):
    return set(np.nonzero(stencil.unpack_bitmask(bitmask_row, vocab_size))[0].tolist())


def walk(matcher, tok, rng, max_steps=400):
    """Samples uniformly among allowed tokens until end-of-sequence; returns the text."""
    mask = stencil.allocate_token_bitmask(1, tok.vocab_size)
    out = b""
    for _ in range(max_steps):
        matcher.fill_next_token_bitmask(mask)
        ids = sorted(allowed(mask[0], tok.vocab_size))
        assert ids, "a mask allowed nothing before the output was complete"
        t = rng.choice(ids)
        assert matcher.accept_token(t)
        if t in tok.eos_ids:
            assert matcher.is_terminated()
            return out.decode("utf-8")
        out += tok.token_bytes(t)
    raise AssertionError(f"no end within {max_steps} tokens: {out[:200]!r}")


def test_tokenizer_from_file_needs_eos_when_no_config_names_it(tokenizer_json):
    with pytest.raises(ValueError, match="eos_ids"):
        stencil.Tokenizer.from_file(tokenizer_json)
    tok = stencil.Tokenizer.from_file(tokenizer_json, eos_ids=[SMOLLM2_EOS])
    assert tok.vocab_size == 49152
    assert tok.eos_ids == [SMOLLM2_EOS]
    assert tok.token_bytes(tok.encode("hello")[0]) == b"hello"
    # Special-token text in a string is text, never the control token.
    assert SMOLLM2_EOS not in tok.encode("<|im_end|>")


def test_tokenizer_errors_name_the_problem(tokenizer_json, tmp_path):
    with pytest.raises(OSError, match="nope.json"):
        stencil.Tokenizer.from_file(str(tmp_path / "nope.json"), eos_ids=[0])
    with pytest.raises(ValueError, match="smaller than the tokenizer's 49152"):
        stencil.Tokenizer.from_file(tokenizer_json, eos_ids=[2], vocab_size=100)
    with pytest.raises(ValueError, match="outside"):
        stencil.Tokenizer.from_file(tokenizer_json, eos_ids=[10**6])
    with pytest.raises(ValueError, match="tokenizer JSON"):
        stencil.Tokenizer.from_json("{", eos_ids=[0])


def test_tokenizer_from_json_and_config_beside_the_file(tokenizer_json, tmp_path):
    text = open(tokenizer_json, encoding="utf-8").read()
    a = stencil.Tokenizer.from_json(text, eos_ids=[2])
    (tmp_path / "tokenizer.json").write_text(text, encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    b = stencil.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert b.eos_ids == [2, 0]
    assert a.encode("a tokenizer") == b.encode("a tokenizer")


def test_padded_vocabulary_never_allows_padding_ids(tokenizer_json):
    tok = stencil.Tokenizer.from_file(tokenizer_json, eos_ids=[2], vocab_size=49152 + 100)
    c = stencil.Constraint.any_json(tok)
    m = c.matcher()
    mask = stencil.allocate_token_bitmask(1, tok.vocab_size)
    assert mask.shape == (1, (49152 + 100 + 31) // 32)
    m.fill_next_token_bitmask(mask)
    ids = allowed(mask[0], tok.vocab_size)
    assert ids and max(ids) < 49152
    assert not m.accept_token(49152 + 5)
    assert not m.accept_token(-1)


def test_from_token_bytes_vocabulary(tok):
    tokens = [b"<eos>", b"a", b"b", b"ab", b"<ctl>"]
    t = stencil.Tokenizer.from_token_bytes(tokens, eos_ids=[0], special=[True, False, False, False, True])
    c = stencil.Constraint.regex("a+b", t)
    m = c.matcher()
    assert sorted(m.allowed_tokens()) == [1, 3]
    assert m.accept_token(3)
    assert m.allowed_tokens() == [0]
    with pytest.raises(ValueError, match="no text encoder"):
        c.matcher().forced_tokens()
    with pytest.raises(ValueError, match="special has 2 entries"):
        stencil.Tokenizer.from_token_bytes(tokens, eos_ids=[0], special=[True, False])


def test_bitmask_layout_matches_allowed_tokens(tok):
    c = stencil.Constraint.json_schema(PERSON, tok)
    m = c.matcher()
    mask = stencil.allocate_token_bitmask(3, tok.vocab_size)
    assert mask.dtype == np.int32 and mask.shape == (3, 1536)
    assert (mask == -1).all()
    m.fill_next_token_bitmask(mask, 2)
    want = set(m.allowed_tokens())
    assert allowed(mask[2], tok.vocab_size) == want
    # Bit i % 32 of word i // 32, by hand.
    for i in list(want)[:20]:
        assert (int(mask[2, i // 32]) >> (i % 32)) & 1
    assert (mask[:2] == -1).all(), "other rows untouched"


def test_json_schema_walks_end_valid(tok):
    jsonschema = need("jsonschema")
    rng = random.Random(7)
    for name in ["person", "measurement", "order", "event", "review", "contact"]:
        schema = corpus_schema(name)
        c = stencil.Constraint.json_schema(schema, tok)
        for _ in range(3):
            text = walk(c.matcher(max_tokens=300), tok, rng)
            jsonschema.validate(json.loads(text), schema)


def test_schema_as_text_and_options(tok):
    c = stencil.Constraint.json_schema(json.dumps({"type": "array", "items": {"type": "integer"}}), tok, whitespace="compact")
    m = c.matcher()
    for t in tok.encode("[1,2]"):
        assert m.accept_token(t)
    assert m.is_accepting()
    m2 = c.matcher()
    assert not m2.accept_token(tok.encode("[ ")[0]) or not m2.accept_token(tok.encode(" ")[0])
    with pytest.raises(ValueError, match="property_order"):
        stencil.Constraint.json_schema({}, tok, property_order="random")


def test_schema_error_carries_keyword_and_pointer(tok):
    with pytest.raises(stencil.SchemaError) as e:
        stencil.Constraint.json_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, tok)
    assert e.value.pointer == "#/properties/a"
    assert isinstance(e.value, ValueError) and isinstance(e.value, stencil.StencilError)
    # An unknown format is an annotation with a warning, refused under format="strict".
    c = stencil.Constraint.json_schema({"type": "string", "format": "no-such-format"}, tok)
    assert any("no-such-format" in w for w in c.warnings)
    with pytest.raises(stencil.SchemaError) as e:
        stencil.Constraint.json_schema({"type": "string", "format": "no-such-format"}, tok, format="strict")
    assert e.value.keyword == "format"
    assert e.value.pointer.endswith("format") or e.value.pointer == "#"
    with pytest.raises(stencil.SchemaError) as e:
        stencil.Constraint.regex("(?<=a)b", tok)
    assert "look-around" in str(e.value)
    with pytest.raises(stencil.SchemaError):
        stencil.Constraint.choice([], tok)
    with pytest.raises(TypeError, match="not JSON-serializable"):
        stencil.Constraint.json_schema({"type": object()}, tok)


def test_lenient_downgrades_to_warnings(tok):
    schema = {"type": "string", "format": "no-such-format"}
    c = stencil.Constraint.json_schema(schema, tok, lenient=True)
    assert c.warnings and "format" in c.warnings[0]


def test_budget_closes_output_and_refuses_too_small(tok):
    jsonschema = need("jsonschema")
    schema = {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}
    c = stencil.Constraint.json_schema(schema, tok)
    with pytest.raises(stencil.BudgetError) as e:
        c.matcher(max_tokens=2)
    assert e.value.min_tokens > 2 and e.value.max_tokens == 2
    rng = random.Random(3)
    for budget in (e.value.min_tokens, e.value.min_tokens + 3, 12):
        m = c.matcher(max_tokens=budget)
        assert m.tokens_left == budget
        text = walk(m, tok, rng)
        jsonschema.validate(json.loads(text), schema)
        assert m.num_tokens - 1 <= budget  # end-of-sequence not counted


def test_regex_choice_and_any_json(tok):
    rng = random.Random(1)
    date = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    c = stencil.Constraint.regex(date, tok)
    for _ in range(5):
        assert re.fullmatch(date, walk(c.matcher(), tok, rng))
    c = stencil.Constraint.choice(["red", "green", "blue"], tok)
    assert {walk(c.matcher(), tok, random.Random(s)) for s in range(12)} <= {"red", "green", "blue"}
    c = stencil.Constraint.any_json(tok, object_only=True)
    assert isinstance(json.loads(walk(c.matcher(max_tokens=60), tok, rng)), dict)


def test_tools_constraint(tok):
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}},
        {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    ]
    c = stencil.Constraint.tools(tools, tok, tool_choice="required", max_calls=1)
    text = walk(c.matcher(max_tokens=80), tok, random.Random(5))
    m = re.fullmatch(r"<tool_call>\n(.*)\n</tool_call>", text, re.S)
    assert m, text
    call = json.loads(m.group(1))
    assert call["name"] in ("get_weather", "get_time")
    c = stencil.Constraint.tools(tools, tok, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert json.loads(walk(c.matcher(max_tokens=80), tok, random.Random(2))[len("<tool_call>\n"):-len("\n</tool_call>")])["name"] == "get_time"
    with pytest.raises(stencil.SchemaError, match="not among the tools"):
        stencil.Constraint.tools(tools, tok, tool_choice="nope")
    with pytest.raises(ValueError, match=r"tools\[0\] has no function name"):
        stencil.Constraint.tools([{"parameters": {}}], tok)


def test_rollback_reset_and_forced_tokens(tok):
    c = stencil.Constraint.json_schema(PERSON, tok, whitespace="compact")
    m = c.matcher()
    first = set(m.allowed_tokens())
    assert m.forced_bytes() == b'{"name":"'
    forced = m.forced_tokens()
    assert forced, "the opening `{\"name\":\"` is forced"
    assert b'{"name":"'.startswith(b"".join(tok.token_bytes(t) for t in forced))
    assert m.num_tokens == len(forced)
    m.rollback(len(forced))
    assert m.num_tokens == 0 and set(m.allowed_tokens()) == first
    with pytest.raises(stencil.MaskError, match="roll back"):
        m.rollback(1)
    ids = tok.encode('{"name":"Ann","age":7}')
    for t in ids:
        assert m.accept_token(t)
    assert m.is_accepting() and not m.is_terminated()
    assert m.accept_token(SMOLLM2_EOS) and m.is_terminated()
    m.reset()
    assert m.num_tokens == 0 and not m.is_accepting()
    assert m.forced_bytes().startswith(b"{")
    # A refused token changes nothing.
    before = m.allowed_tokens()
    assert not m.accept_token(tok.encode("]")[0])
    assert m.allowed_tokens() == before


def test_forced_tokens_with_a_callable(tok):
    c = stencil.Constraint.json_schema(PERSON, tok, whitespace="compact")
    calls = []

    def encode(text):
        calls.append(text)
        return tok.encode(text)

    got = c.matcher().forced_tokens(encode=encode)
    assert calls and got == c.matcher().forced_tokens()


def test_batched_fill_equals_single_fills(tok):
    schemas = [corpus_schema(n) for n in ["person", "order", "event", "review"]]
    cs = [stencil.Constraint.json_schema(s, tok) for s in schemas]
    rng = random.Random(11)
    matchers = [c.matcher() for c in cs for _ in range(3)]
    # Advance each a random number of allowed steps.
    for m in matchers:
        for _ in range(rng.randrange(0, 15)):
            ids = m.allowed_tokens()
            if not ids or SMOLLM2_EOS in ids:
                break
            assert m.accept_token(rng.choice(ids))
    batch = stencil.allocate_token_bitmask(len(matchers) + 2, tok.vocab_size)
    rows = list(range(2, len(matchers) + 2))
    stencil.fill_next_token_bitmasks(matchers, batch, rows)
    single = stencil.allocate_token_bitmask(1, tok.vocab_size)
    for m, r in zip(matchers, rows):
        m.fill_next_token_bitmask(single)
        assert np.array_equal(batch[r], single[0])
    assert (batch[:2] == -1).all()
    with pytest.raises(ValueError, match="in use"):
        stencil.fill_next_token_bitmasks([matchers[0], matchers[0]], batch)
    with pytest.raises(ValueError, match="named twice"):
        stencil.fill_next_token_bitmasks(matchers[:2], batch, [1, 1])
    with pytest.raises(ValueError, match="out of range"):
        stencil.fill_next_token_bitmasks(matchers[:1], batch, [99])
    with pytest.raises(TypeError, match="not a stencil.Matcher"):
        stencil.fill_next_token_bitmasks([object()], batch)


def test_bad_bitmasks_are_clear_errors(tok):
    m = stencil.Constraint.any_json(tok).matcher()
    with pytest.raises(TypeError, match="int32"):
        m.fill_next_token_bitmask(np.zeros((1, 1536), dtype=np.int64))
    with pytest.raises(ValueError, match="fewer than the 1536"):
        m.fill_next_token_bitmask(np.zeros((1, 100), dtype=np.int32))
    with pytest.raises(ValueError, match="C-contiguous"):
        m.fill_next_token_bitmask(np.zeros((1536, 2), dtype=np.int32).T)
    ro = stencil.allocate_token_bitmask(1, tok.vocab_size)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        m.fill_next_token_bitmask(ro)
    with pytest.raises(ValueError, match="out of range"):
        m.fill_next_token_bitmask(stencil.allocate_token_bitmask(2, tok.vocab_size), 2)
    with pytest.raises(TypeError, match="allocate_token_bitmask"):
        m.fill_next_token_bitmask([0] * 1536)


def test_torch_bitmask_and_apply(tok):
    torch = need("torch")
    m = stencil.Constraint.choice(["yes", "no"], tok).matcher()
    mask = torch.full((2, 1536), -1, dtype=torch.int32)
    m.fill_next_token_bitmask(mask, 1)
    want = set(m.allowed_tokens())
    assert set(torch.nonzero(stencil.unpack_bitmask(mask[1], tok.vocab_size)).flatten().tolist()) == want
    logits = torch.zeros(2, tok.vocab_size)
    stencil.apply_token_bitmask(logits, mask)
    assert set(torch.nonzero(torch.isfinite(logits[1])).flatten().tolist()) == want
    assert torch.isfinite(logits[0]).all()
    # numpy logits, a model wider than the mask: extra columns forbidden.
    np_logits = np.zeros((1, tok.vocab_size + 64), dtype=np.float32)
    stencil.apply_token_bitmask(np_logits, mask[1:].numpy())
    assert set(np.nonzero(np.isfinite(np_logits[0]))[0].tolist()) == want
    with pytest.raises(TypeError, match="torch.float32"):
        m.fill_next_token_bitmask(torch.zeros(1, 1536))
    with pytest.raises(ValueError, match="non-contiguous"):
        m.fill_next_token_bitmask(torch.zeros(1536, 2, dtype=torch.int32).T)


def test_masks_computed_on_many_threads_agree(tok):
    c = stencil.Constraint.json_schema(corpus_schema("order"), tok)
    text = tok.encode(json.dumps({"id": "A-1", "items": []}))
    ref = []
    m = c.matcher()
    mask = stencil.allocate_token_bitmask(1, tok.vocab_size)
    for t in text:
        m.fill_next_token_bitmask(mask)
        ref.append(mask.copy())
        if not m.accept_token(t):
            break
    errors = []

    def worker():
        try:
            mm = c.matcher()
            mk = stencil.allocate_token_bitmask(1, tok.vocab_size)
            for t, want in zip(text, ref):
                mm.fill_next_token_bitmask(mk)
                assert np.array_equal(mk, want)
                if not mm.accept_token(t):
                    break
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
