"""A vLLM logits processor (the custom logits-processor interface of vLLM's model runner V2,
``vllm.v1.worker.gpu.sample.logits_processor.LogitsProcessor``) that constrains each request
named in its ``extra_args``.

Start vLLM with it::

    vllm serve MODEL --logits-processors stencil.vllm:StencilLogitsProcessor

and constrain a request through ``vllm_xargs`` (OpenAI server) or
``SamplingParams(extra_args=...)`` (offline ``LLM``)::

    client.chat.completions.create(..., extra_body={"vllm_xargs": {"stencil": json.dumps(
        {"json_schema": {...}})}})
    LLM(MODEL, logits_processors=[StencilLogitsProcessor]).generate(
        prompt, SamplingParams(max_tokens=200, extra_args={"stencil": {"regex": "[0-9]+"}}))

``stencil`` holds exactly one of ``json_schema`` (object or JSON text), ``regex``, ``grammar``
(llama.cpp GBNF text), ``choice``
(list of strings), ``json_object`` (true) or ``tools`` (with optional ``tool_choice``), and
optionally ``options`` (keywords of ``stencil.Constraint.json_schema``). The request's
``max_tokens`` becomes the matcher's budget, so outputs end complete. Requests without
``stencil`` are left alone. Speculative decoding is not supported (a constrained request
under it is an error, never silently unconstrained).

The logic lives in :class:`StencilBatch`, which needs neither vLLM nor a GPU; the vLLM class is
a thin shell over it.
"""

import json
import re
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from stencil import _stencil
from stencil.bitmask import allocate_token_bitmask, apply_token_bitmask, fill_next_token_bitmasks, text_budget
from stencil.errors import SchemaError

KINDS = ("json_schema", "regex", "grammar", "choice", "json_object", "tools")


def parse_spec(extra_args: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The ``stencil`` entry of a request's ``extra_args``, checked (None when absent).

    Raises ``ValueError`` naming what is wrong."""
    if not extra_args or "stencil" not in extra_args:
        return None
    spec = extra_args["stencil"]
    if isinstance(spec, str):  # vllm_xargs values arrive as strings
        try:
            spec = json.loads(spec)
        except ValueError as e:
            raise ValueError(f"extra_args.stencil is not valid JSON: {e}") from None
    if not isinstance(spec, dict):
        raise ValueError("extra_args.stencil must be an object")
    kinds = [k for k in KINDS if k in spec]
    unknown = sorted(set(spec) - set(KINDS) - {"options", "tool_choice"})
    if unknown:
        raise ValueError(f"extra_args.stencil has unknown keys {unknown}; expected one of {list(KINDS)}")
    if len(kinds) != 1:
        raise ValueError(f"extra_args.stencil needs exactly one of {list(KINDS)}, got {kinds}")
    kind = kinds[0]
    value = spec[kind]
    if kind == "json_schema" and isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ValueError(f"extra_args.stencil.json_schema is not valid JSON: {e}") from None
    if kind in ("regex", "grammar") and not isinstance(value, str):
        raise ValueError(f"extra_args.stencil.{kind} must be a string")
    if kind == "choice" and not (isinstance(value, list) and value and all(isinstance(c, str) for c in value)):
        raise ValueError("extra_args.stencil.choice must be a non-empty list of strings")
    if kind == "json_object" and value is not True:
        raise ValueError("extra_args.stencil.json_object must be true")
    if kind == "tools" and not isinstance(value, list):
        raise ValueError("extra_args.stencil.tools must be a list of tool definitions")
    options = spec.get("options", {})
    if not isinstance(options, dict):
        raise ValueError("extra_args.stencil.options must be an object")
    out = {"kind": kind, "value": value, "options": options}
    if "tool_choice" in spec:
        out["tool_choice"] = spec["tool_choice"]
    return out


def compile_spec(spec: Dict[str, Any], tokenizer: "_stencil.Tokenizer") -> "_stencil.Constraint":
    """The constraint a parsed spec names (raises ``stencil.SchemaError``)."""
    kind, value, options = spec["kind"], spec["value"], spec["options"]
    if kind == "json_schema":
        return _stencil.Constraint.json_schema(value, tokenizer, **options)
    if kind == "regex":
        return _stencil.Constraint.regex(value, tokenizer)
    if kind == "grammar":
        # vLLM takes GBNF (a line `name ::= ...`) or Lark here.
        if re.search(r"^\s*[\w-]+\s*::=", value, re.M):
            return _stencil.Constraint.gbnf(value, tokenizer)
        return _stencil.Constraint.lark(value, tokenizer)
    if kind == "choice":
        return _stencil.Constraint.choice(value, tokenizer)
    if kind == "json_object":
        return _stencil.Constraint.any_json(tokenizer, object_only=True)
    return _stencil.Constraint.tools(value, tokenizer, tool_choice=spec.get("tool_choice"))


_CHECK_TOKENIZER = None


def check_spec(spec: Dict[str, Any]) -> None:
    """Compiles ``spec`` over a byte vocabulary, so a request whose constraint cannot compile
    fails at admission (``ValueError`` with the schema pointer) instead of in the sampler."""
    global _CHECK_TOKENIZER
    if _CHECK_TOKENIZER is None:
        _CHECK_TOKENIZER = _stencil.Tokenizer.from_token_bytes([bytes([b]) for b in range(256)] + [b""], eos_ids=[256])
    compile_spec(spec, _CHECK_TOKENIZER)


class StencilBatch:
    """Per-slot matchers for a batch whose slots are recycled (vLLM's persistent batch),
    independent of vLLM: the shell passes plain arrays.

    ``tokenizer``: the model's ``stencil.Tokenizer``; ``cache_size``: compiled constraints
    kept (keyed by their spec) so repeated schemas compile once.
    """

    def __init__(self, tokenizer: "_stencil.Tokenizer", max_slots: int, cache_size: int = 64):
        self.tokenizer = tokenizer
        self.vocab_size = tokenizer.vocab_size
        self.matchers: List[Optional[_stencil.Matcher]] = [None] * max_slots
        self.accepted = [0] * max_slots  # output tokens each slot's matcher has taken
        self._cache: "OrderedDict[str, _stencil.Constraint]" = OrderedDict()
        self._cache_size = cache_size
        self._bitmask = allocate_token_bitmask(0, self.vocab_size)

    def constraint(self, spec: Dict[str, Any]) -> "_stencil.Constraint":
        key = json.dumps(spec, sort_keys=True)
        c = self._cache.get(key)
        if c is None:
            c = compile_spec(spec, self.tokenizer)
            self._cache[key] = c
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return c

    def add(self, slot: int, spec: Optional[Dict[str, Any]], max_tokens: Optional[int]) -> bool:
        """(Re)initializes ``slot`` for a new request; False when it is unconstrained."""
        self.accepted[slot] = 0
        if spec is None:
            self.matchers[slot] = None
            return False
        self.matchers[slot] = self.constraint(spec).matcher(max_tokens=text_budget(max_tokens))
        return True

    def apply(
        self,
        logits,
        row_slots: np.ndarray,
        row_local_pos: np.ndarray,
        row_pos: np.ndarray,
        row_input_ids: np.ndarray,
        prompt_len: Callable[[int], int],
        history: Callable[[int, int, int], Sequence[int]],
    ):
        """Masks the rows of constrained slots in ``logits`` ([rows, vocab], torch, any
        device). Per row: its slot, its offset among its request's rows (speculative
        decoding), the position and id of the token fed at it. ``history(slot, a, b)``
        returns output tokens ``a..b`` (committed ones; the newest is the fed token)."""
        rows = []
        for row, slot in enumerate(row_slots.tolist()):
            m = self.matchers[slot] if 0 <= slot < len(self.matchers) else None
            if m is None:
                continue
            if int(row_local_pos[row]) != 0:
                raise RuntimeError(
                    "stencil's vLLM logits processor does not support speculative decoding: "
                    "a constrained request got draft-token rows"
                )
            out_len = int(row_pos[row]) + 1 - prompt_len(slot)  # output tokens so far
            self._catch_up(slot, m, out_len, int(row_input_ids[row]), history)
            rows.append((row, m))
        if not rows:
            return logits
        if self._bitmask.shape[0] < len(rows):
            self._bitmask = allocate_token_bitmask(len(rows), self.vocab_size)
        mask = self._bitmask[: len(rows)]
        live = [k for k, (_, m) in enumerate(rows) if not m.is_terminated()]
        mask.fill(-1)
        if live:
            fill_next_token_bitmasks([rows[k][1] for k in live], mask, live)
        return apply_token_bitmask(logits, mask, [r for r, _ in rows])

    def _catch_up(self, slot, m, out_len, fed, history) -> None:
        """Feeds the slot's matcher the output tokens it has not seen."""
        done = self.accepted[slot]
        if out_len < done:
            raise RuntimeError(f"slot {slot}: the output shrank from {done} to {out_len} tokens")
        if out_len == done:
            return
        new = list(history(slot, done, out_len - 1)) + [fed]
        for tok in new:
            if m.is_terminated():
                break
            if not m.accept_token(int(tok)):
                raise RuntimeError(f"slot {slot}: token {int(tok)} was sampled although the constraint forbids it")
        self.accepted[slot] = out_len


def load_tokenizer(model_config: Any, vocab_size: int) -> "_stencil.Tokenizer":
    """The serving model's tokenizer (through ``transformers``, as vLLM loads it), with every
    end-of-sequence id its generation config names."""
    from transformers import AutoTokenizer

    name = getattr(model_config, "tokenizer", None) or model_config.model
    revision = getattr(model_config, "tokenizer_revision", None)
    hf = AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=getattr(model_config, "trust_remote_code", False))
    eos = [hf.eos_token_id] if hf.eos_token_id is not None else []
    try:
        from transformers import GenerationConfig

        gen = GenerationConfig.from_pretrained(model_config.model)
        ids = gen.eos_token_id
        for i in ids if isinstance(ids, list) else [ids]:
            if i is not None and i not in eos:
                eos.append(i)
    except Exception:  # no generation_config.json: the tokenizer's EOS alone
        pass
    return _stencil.Tokenizer.from_hf(hf, eos_ids=eos, vocab_size=vocab_size)


def _host(x) -> Any:
    """A vLLM buffer (UVA-backed, staged-write or plain tensor) as something indexable on
    the host."""
    if hasattr(x, "np"):
        return x.np
    if hasattr(x, "gpu"):
        return x.gpu
    return x


def _to_np(t) -> np.ndarray:
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


try:
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as _VllmLogitsProcessor
except Exception:  # vLLM absent (or a release without model runner V2)
    _VllmLogitsProcessor = None


if _VllmLogitsProcessor is not None:

    class StencilLogitsProcessor(_VllmLogitsProcessor):
        """vLLM's custom logits processor: constrains requests with ``extra_args.stencil``."""

        def __init__(self, vllm_config, req_states):
            super().__init__(vllm_config, req_states)
            self.req_states = req_states
            tok = load_tokenizer(vllm_config.model_config, req_states.vocab_size)
            self.batch = StencilBatch(tok, req_states.max_num_reqs)

        @classmethod
        def validate_params(cls, sampling_params) -> None:
            spec = parse_spec(getattr(sampling_params, "extra_args", None))
            if spec is not None:
                try:
                    check_spec(spec)
                except SchemaError as e:
                    raise ValueError(f"extra_args.stencil: {e}") from None

        def add_request(self, req_idx, sampling_params) -> bool:
            spec = parse_spec(getattr(sampling_params, "extra_args", None))
            return self.batch.add(req_idx, spec, getattr(sampling_params, "max_tokens", None))

        def apply(self, logits, ctx):
            rs = self.req_states
            prompt = _host(rs.prompt_len)
            tokens = _host(rs.all_token_ids)

            def prompt_len(slot: int) -> int:
                return int(prompt[slot])

            def history(slot: int, a: int, b: int):
                p = prompt_len(slot)
                return _to_np(tokens[slot, p + a : p + b]).tolist() if b > a else []

            return self.batch.apply(
                logits,
                _to_np(ctx.expanded_idx_mapping),
                _to_np(ctx.expanded_local_pos),
                _to_np(ctx.pos),
                _to_np(ctx.input_ids),
                prompt_len,
                history,
            )

