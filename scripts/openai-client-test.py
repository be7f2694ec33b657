"""Drives a running `stencil serve` with the official `openai` Python package.

Usage: python scripts/openai-client-test.py BASE_URL
Asserts on parsed results: plain chat, streaming, response_format json_schema, tools.
"""
import json
import sys

import openai

base = sys.argv[1]
client = openai.OpenAI(base_url=f"{base}/v1", api_key="test-key")
model = client.models.list().data[0].id
# models.retrieve: GET /v1/models/{id}.
assert client.models.retrieve(model).id == model
try:
    client.models.retrieve("no-such-model")
    raise AssertionError("an unknown model was retrieved")
except openai.NotFoundError:
    pass

# Plain chat.
r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of France?"}],
    max_tokens=30,
    temperature=0,
    seed=1,
)
assert r.choices[0].message.role == "assistant"
assert r.choices[0].message.content, r
assert r.choices[0].finish_reason in ("stop", "length")
assert r.usage.completion_tokens > 0
print("plain:", repr(r.choices[0].message.content))

# Streaming: the same request reassembles to the same text.
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What is the capital of France?"}],
    max_tokens=30,
    temperature=0,
    seed=1,
    stream=True,
    stream_options={"include_usage": True},
)
parts, finish, usage = [], None, None
for chunk in stream:
    if chunk.usage:
        usage = chunk.usage
    for c in chunk.choices:
        if c.delta.content:
            parts.append(c.delta.content)
        if c.finish_reason:
            finish = c.finish_reason
assert "".join(parts) == r.choices[0].message.content, ("".join(parts), r.choices[0].message.content)
assert finish == r.choices[0].finish_reason
assert usage is not None and usage.completion_tokens == r.usage.completion_tokens
print("stream: %d chunks" % len(parts))

# response_format json_schema.
schema = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 30},
        "population": {"type": "integer", "minimum": 0},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}
r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "A large city and its population, as JSON."}],
    max_tokens=80,
    response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}},
)
value = json.loads(r.choices[0].message.content)
assert set(value) == {"city", "population"} and isinstance(value["population"], int), value
print("json_schema:", value)

# Tools.
tools = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}]
r = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "What's the weather in Paris?"}],
    tools=tools,
    tool_choice="required",
    max_tokens=120,
    temperature=0,
)
assert r.choices[0].finish_reason == "tool_calls", r
call = r.choices[0].message.tool_calls[0]
assert call.id.startswith("call_") and call.function.name == "get_weather"
args = json.loads(call.function.arguments)
assert isinstance(args["city"], str) and args["unit"] in ("celsius", "fahrenheit"), args
print("tools:", call.function.name, args)

# The client's default temperature (1.0: it sends none) with a small budget: the budget makes
# every call close in time, so at least one complete, valid call always comes back, and
# calls are reported with finish_reason "tool_calls", never cut.
for attempt in range(3):
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What's the weather in Paris and in Rome?"}],
        tools=tools,
        tool_choice="required",
        max_tokens=80,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls, choice
    assert r.usage.completion_tokens <= 80, r.usage
    for call in choice.message.tool_calls:
        args = json.loads(call.function.arguments)
        assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit"), args
    print("tools at the default temperature:", len(choice.message.tool_calls), "call(s),",
          "closed by budget:", (r.model_extra or {}).get("stencil", {}).get("closed_by_budget"))

# A budget smaller than the shortest output is a 400 naming max_tokens.
try:
    client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "x"}], tools=tools,
        tool_choice="required", max_tokens=3)
    raise AssertionError("max_tokens=3 was accepted for a required tool call")
except openai.BadRequestError as e:
    assert "max_tokens" in str(e) and "at least" in str(e), e

# Errors surface as the client's exception types.
try:
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], n=2)
    raise AssertionError("n=2 was accepted")
except openai.BadRequestError as e:
    assert "n = 1" in str(e), e
try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    raise AssertionError("unknown model was accepted")
except openai.NotFoundError:
    pass
# An explicit max_tokens beyond the context is a 400, not a silent cap.
try:
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=100000)
    raise AssertionError("max_tokens beyond the context was accepted")
except openai.BadRequestError as e:
    assert "context" in str(e), e
print("openai client test: all passed")
