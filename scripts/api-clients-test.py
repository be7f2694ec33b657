"""Drives a running `stencil serve` with the official `anthropic`, `ollama` and `openai`
(Responses API) Python packages.

Usage: python scripts/api-clients-test.py BASE_URL API_KEY
Asserts on parsed results: plain and streamed answers, tool calls whose streamed argument
fragments join to valid JSON, schema-constrained output validated by `jsonschema`, Chinese text
intact across stream fragments, and each API's own error classes for bad input.
"""
import json
import sys

import anthropic
import jsonschema
import ollama
import openai

base, key = sys.argv[1], sys.argv[2]
model = openai.OpenAI(base_url=f"{base}/v1", api_key=key).models.list().data[0].id

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
GREETINGS = ["你好，世界", "谢谢你的帮助", "早上好"]
CHINESE = {"type": "string", "enum": GREETINGS}


def expect(error_class, call, what):
    try:
        call()
    except error_class as e:
        print(f"  {what}: {type(e).__name__} {getattr(e, 'status_code', '')}")
        return e
    raise AssertionError(f"{what}: no {error_class.__name__}")


# --- Anthropic Messages -------------------------------------------------------------------
print("anthropic", anthropic.__version__)
ac = anthropic.Anthropic(base_url=base, api_key=key)
user = [{"role": "user", "content": "What is the capital of France?"}]

# The current SDK has no sampling arguments; the server still takes `temperature` & co.
m = ac.messages.create(model=model, max_tokens=30, messages=user, extra_body={"temperature": 0})
assert m.type == "message" and m.role == "assistant", m
assert m.content[0].type == "text" and m.content[0].text, m
assert m.stop_reason in ("end_turn", "max_tokens"), m.stop_reason
assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0, m.usage
print("  plain:", repr(m.content[0].text))
counted = ac.messages.count_tokens(model=model, messages=user)
assert counted.input_tokens == m.usage.input_tokens, (counted, m.usage)

# Streamed text: the deltas join to the final message's text.
with ac.messages.stream(model=model, max_tokens=30, messages=user, extra_body={"temperature": 0}) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
assert streamed and streamed == final.content[0].text, (streamed, final)
assert final.content[0].text == m.content[0].text, "stream and plain differ at temperature 0"

# A forced tool streamed: input_json_delta fragments join to valid JSON equal to the block's input.
weather_tool = {"name": "get_weather", "description": "Current weather in a city", "input_schema": WEATHER}
fragments, kinds = [], []
with ac.messages.stream(
    model=model,
    max_tokens=80,
    messages=[{"role": "user", "content": "What is the weather in Paris?"}],
    tools=[weather_tool],
    tool_choice={"type": "tool", "name": "get_weather"},
) as s:
    for event in s:
        kinds.append(event.type)
        if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            fragments.append(event.delta.partial_json)
    final = s.get_final_message()
assert final.stop_reason == "tool_use", final
blocks = [b for b in final.content if b.type == "tool_use"]
assert len(blocks) >= 1 and blocks[0].name == "get_weather", final
joined = json.loads("".join(fragments))
jsonschema.validate(joined, WEATHER)
assert joined == blocks[0].input, (joined, blocks[0].input)
assert blocks[0].id.startswith("toolu_"), blocks[0].id
assert len(fragments) > 1, "arguments arrived in one piece"
assert kinds[0] == "message_start" and "message_stop" in kinds, kinds
print("  streamed tool_use:", joined, f"({len(fragments)} fragments)")

# The tool result goes back: tool_use and tool_result blocks in history.
m = ac.messages.create(
    model=model,
    max_tokens=30,
    extra_body={"temperature": 0},
    tools=[weather_tool],
    tool_choice={"type": "none"},
    messages=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": blocks[0].id, "name": "get_weather", "input": joined}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": blocks[0].id, "content": "18 degrees, sunny"}]},
    ],
)
assert m.content and m.content[0].type == "text", m
print("  after tool_result:", repr(m.content[0].text))

# Structured output the Anthropic way: a forced tool, validated.
m = ac.messages.create(
    model=model,
    max_tokens=60,
    messages=[{"role": "user", "content": "Invent a person."}],
    tools=[{"name": "record_person", "description": "Record a person", "input_schema": PERSON}],
    tool_choice={"type": "tool", "name": "record_person"},
)
person = next(b for b in m.content if b.type == "tool_use").input
jsonschema.validate(person, PERSON)
print("  forced tool:", person)

# output_config.format: the text is JSON valid against the schema.
m = ac.messages.create(
    model=model,
    max_tokens=60,
    messages=[{"role": "user", "content": "Invent a person."}],
    output_config={"format": {"type": "json_schema", "schema": PERSON}},
)
jsonschema.validate(json.loads(m.content[0].text), PERSON)
print("  output_config.format:", m.content[0].text)

# Chinese text streamed: multi-byte characters split across tokens arrive whole.
with ac.messages.stream(
    model=model,
    max_tokens=40,
    messages=[{"role": "user", "content": "用中文问候我。"}],
    output_config={"format": {"type": "json_schema", "schema": CHINESE}},
) as s:
    pieces = list(s.text_stream)
    final = s.get_final_message()
text = "".join(pieces)
assert "\ufffd" not in text and text == final.content[0].text, (pieces, final)
assert json.loads(text) in GREETINGS, text
print("  Chinese:", text, f"({len(pieces)} deltas)")

# Errors in Anthropic's classes and shape.
e = expect(anthropic.BadRequestError, lambda: ac.messages.create(model=model, max_tokens=10, messages=user, extra_body={"temperature": 3}), "temperature 3")
assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", e.body
assert "temperature" in e.body["error"]["message"], e.body
expect(anthropic.BadRequestError, lambda: ac.messages.create(model=model, max_tokens=10, messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]), "image block")
expect(anthropic.BadRequestError, lambda: ac.messages.create(model=model, max_tokens=10, messages=[]), "no messages")
expect(anthropic.NotFoundError, lambda: ac.messages.create(model="no-such-model", max_tokens=10, messages=user), "unknown model")
e = expect(anthropic.AuthenticationError, lambda: anthropic.Anthropic(base_url=base, api_key="wrong").messages.create(model=model, max_tokens=10, messages=user), "wrong key")
assert e.body["error"]["type"] == "authentication_error", e.body

# --- Ollama -------------------------------------------------------------------------------
print("ollama")
oc = ollama.Client(host=base, headers={"Authorization": f"Bearer {key}"})
names = [m.model for m in oc.list().models]
assert model in names, names
shown = oc.show(model)
assert shown.details.format == "gguf" and shown.template, shown

r = oc.chat(model=model, messages=user, options={"temperature": 0, "num_predict": 30})
assert r.done and r.done_reason in ("stop", "length") and r.message.content, r
assert r.eval_count > 0 and r.prompt_eval_count > 0 and r.total_duration > 0, r
print("  chat:", repr(r.message.content))

chunks = list(oc.chat(model=model, messages=user, options={"temperature": 0, "num_predict": 30}, stream=True))
assert chunks[-1].done and not any(c.done for c in chunks[:-1]), chunks[-1]
assert "".join(c.message.content for c in chunks) == r.message.content, "stream and plain differ at temperature 0"

r = oc.chat(model=model, messages=[{"role": "user", "content": "Invent a person."}], format=PERSON, options={"num_predict": 60, "seed": 3})
jsonschema.validate(json.loads(r.message.content), PERSON)
print("  format schema:", r.message.content)

chunks = list(oc.chat(model=model, messages=[{"role": "user", "content": "用中文问候我。"}], format=CHINESE, options={"num_predict": 40}, stream=True))
text = "".join(c.message.content for c in chunks)
assert "\ufffd" not in text and json.loads(text) in GREETINGS, text
print("  Chinese:", text, f"({len(chunks) - 1} lines)")

r = oc.generate(model=model, prompt="The capital of France is", options={"temperature": 0, "num_predict": 8}, raw=True)
assert r.done and r.response, r
print("  generate raw:", repr(r.response))

# Tools: Ollama has no tool choice; stencil takes OpenAI's in `options` (the official client
# passes options through), so the call is forced. Arguments arrive as an object valid against
# the schema, the streamed call equals the whole one, and the answer to the result comes back.
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city", "parameters": WEATHER}}]
ask = [{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}]
forced = {"temperature": 0, "num_predict": 80, "tool_choice": "required"}
# The official client sends the parameters through its own model of a schema, which keeps
# only type, required, properties (type, enum, description, items): `additionalProperties` and
# `maxLength` never reach the server, so the arguments are checked against what it sent.
sent = ollama.Tool.model_validate(tools[0]).function.parameters.model_dump(exclude_none=True)
r = oc.chat(model=model, messages=ask, tools=tools, options=forced)
assert r.message.tool_calls, r
call = r.message.tool_calls[0]
assert call.function.name == "get_weather", call
jsonschema.validate(dict(call.function.arguments), sent)
print("  tool call:", call.function.name, dict(call.function.arguments))
streamed = [c for c in oc.chat(model=model, messages=ask, tools=tools, options=forced, stream=True) if c.message.tool_calls]
assert streamed and dict(streamed[0].message.tool_calls[0].function.arguments) == dict(call.function.arguments), streamed
r = oc.chat(
    model=model,
    messages=ask + [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": dict(call.function.arguments)}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "18 degrees, sunny"},
    ],
    options={"temperature": 0, "num_predict": 30},
)
assert r.done and r.message.content, r
print("  after tool result:", repr(r.message.content))

# Errors: ollama.ResponseError with the server's message and status.
for what, call in [
    ("format with a broken $ref", lambda: oc.chat(model=model, messages=user, format={"type": "object", "properties": {"a": {"$ref": "#/nope"}}})),
    ("options.num_predict 0", lambda: oc.chat(model=model, messages=user, options={"num_predict": 0})),
    ("unknown model", lambda: oc.chat(model="no-such-model", messages=user)),
    ("think", lambda: oc.chat(model=model, messages=user, think=True)),
]:
    e = expect(ollama.ResponseError, call, what)
    assert e.status_code in (400, 404) and e.error, (e.status_code, e.error)

# --- OpenAI Responses ---------------------------------------------------------------------
print("openai responses", openai.__version__)
rc = openai.OpenAI(base_url=f"{base}/v1", api_key=key)
r = rc.responses.create(model=model, input="What is the capital of France?", max_output_tokens=30, temperature=0)
assert r.object == "response" and r.status in ("completed", "incomplete") and r.output_text, r
assert r.usage.output_tokens > 0, r.usage
print("  plain:", repr(r.output_text))

# Streamed: the deltas join to the final response's text. A response cut by
# max_output_tokens ends with `response.incomplete` (as OpenAI's does), not `.completed`.
deltas, kinds, last = [], [], None
with rc.responses.stream(model=model, input="What is the capital of France?", max_output_tokens=30, temperature=0) as s:
    for event in s:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type in ("response.completed", "response.incomplete"):
            last = event.response
assert kinds[0] == "response.created" and kinds[-1] == f"response.{r.status}", (kinds, r.status)
assert "".join(deltas) == last.output_text == r.output_text, (deltas, last.output_text, r.output_text)

r = rc.responses.create(
    model=model,
    input=[{"role": "user", "content": "Invent a person."}],
    instructions="Answer in JSON.",
    max_output_tokens=60,
    text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}},
)
jsonschema.validate(json.loads(r.output_text), PERSON)
print("  json_schema:", r.output_text)

rtools = [{"type": "function", "name": "get_weather", "description": "Current weather in a city", "parameters": WEATHER, "strict": True}]
fragments = []
with rc.responses.stream(
    model=model,
    input="What is the weather in Paris?",
    tools=rtools,
    tool_choice={"type": "function", "name": "get_weather"},
    max_output_tokens=80,
) as s:
    for event in s:
        if event.type == "response.function_call_arguments.delta":
            fragments.append(event.delta)
    final = s.get_final_response()
calls = [o for o in final.output if o.type == "function_call"]
assert calls and calls[0].name == "get_weather", final.output
args = json.loads("".join(fragments))
jsonschema.validate(args, WEATHER)
assert args == json.loads(calls[0].arguments), (fragments, calls[0].arguments)
print("  streamed function_call:", calls[0].arguments, f"({len(fragments)} fragments)")

r = rc.responses.create(
    model=model,
    input=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather", "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18 degrees, sunny"},
    ],
    tools=rtools,
    tool_choice="none",
    max_output_tokens=30,
    temperature=0,
)
assert r.output_text, r
print("  after function_call_output:", repr(r.output_text))

e = expect(openai.BadRequestError, lambda: rc.responses.create(model=model, input="x", previous_response_id="resp_1"), "previous_response_id")
assert e.body["param"] == "previous_response_id", e.body
expect(openai.BadRequestError, lambda: rc.responses.create(model=model, input="x", text={"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}}}), "bad schema")
print("all API client checks passed")
