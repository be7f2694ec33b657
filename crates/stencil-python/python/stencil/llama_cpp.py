"""A logits processor for llama-cpp-python (``logits_processor=`` of ``Llama.__call__``,
``create_completion`` and ``create_chat_completion``).

::

    from llama_cpp import Llama, LogitsProcessorList
    import stencil.llama_cpp as sl

    llm = Llama(model_path="model.gguf")
    proc = sl.JsonSchemaLogitsProcessor(schema, llm, max_tokens=200)
    out = llm(prompt, max_tokens=200, logits_processor=LogitsProcessorList([proc]))

The vocabulary is read from the loaded model itself (every token's bytes as llama.cpp spells
them; control tokens are never allowed in constrained text; every end-of-generation token ends
the output), so masks match the model exactly. One processor serves one generation: make a new
one (or call ``reset()``) per call.
"""

import ctypes
from typing import Any, Optional, Sequence

import numpy as np

from stencil import _stencil
from stencil.bitmask import allocate_token_bitmask, apply_token_bitmask, text_budget
from stencil.errors import MaskError

# llama.cpp token attributes that are never text (llama.h: llama_token_attr).
_NOT_TEXT = (1 << 0) | (1 << 3) | (1 << 5)  # UNKNOWN, CONTROL, UNUSED


def tokenizer_from_llama(llama: Any) -> "_stencil.Tokenizer":
    """A ``stencil.Tokenizer`` for a loaded ``llama_cpp.Llama`` (cached on the object)."""
    cached = getattr(llama, "_stencil_tokenizer", None)
    if cached is not None:
        return cached
    import llama_cpp

    vocab = llama._model.vocab
    n = llama.n_vocab()
    size = 256
    buf = ctypes.create_string_buffer(size)
    tokens, special, eos = [], [], []
    for i in range(n):
        k = llama_cpp.llama_token_to_piece(vocab, i, buf, size, 0, True)
        if k < 0:  # longer than the buffer: llama.cpp says how long
            big = ctypes.create_string_buffer(-k)
            k = llama_cpp.llama_token_to_piece(vocab, i, big, -k, 0, True)
            tokens.append(big.raw[:k])
        else:
            tokens.append(buf.raw[:k])
        special.append(bool(llama_cpp.llama_vocab_get_attr(vocab, i) & _NOT_TEXT))
        if llama_cpp.llama_vocab_is_eog(vocab, i):
            eos.append(i)
    tok = _stencil.Tokenizer.from_token_bytes(tokens, eos_ids=eos, special=special, vocab_size=n)
    try:
        llama._stencil_tokenizer = tok
    except AttributeError:  # pragma: no cover - a slotted subclass
        pass
    return tok


class LogitsProcessor:
    """Masks every token ``constraint`` forbids; a callable
    ``(input_ids, scores) -> scores`` as llama-cpp-python expects.

    ``max_tokens``: the output's token budget (pass the same as the call's ``max_tokens``);
    tokens after which the output could not be completed within it are masked too.
    """

    def __init__(self, constraint: "_stencil.Constraint", max_tokens: Optional[int] = None):
        self.constraint = constraint
        self.max_tokens = max_tokens
        self.reset()

    def reset(self) -> None:
        """Starts over for a new generation."""
        self.matcher = self.constraint.matcher(max_tokens=text_budget(self.max_tokens))
        self._seen: Optional[int] = None
        self._bitmask = allocate_token_bitmask(1, self.constraint.vocab_size)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        n = len(input_ids)
        if self._seen is None:
            self._seen = n  # the prompt
        elif n < self._seen:
            raise ValueError(
                "input_ids got shorter: this processor already served a generation; "
                "call reset() or make a new one per call"
            )
        for tok in input_ids[self._seen:]:
            if not self.matcher.accept_token(int(tok)):
                raise MaskError(f"token {int(tok)} was sampled although the constraint forbids it")
        self._seen = n
        self.matcher.fill_next_token_bitmask(self._bitmask, 0)
        return apply_token_bitmask(scores, self._bitmask[0])


class JsonSchemaLogitsProcessor(LogitsProcessor):
    """Output valid under ``schema`` for the model loaded in ``llama``; further keywords go
    to ``stencil.Constraint.json_schema``."""

    def __init__(self, schema, llama, *, max_tokens: Optional[int] = None, **options):
        c = _stencil.Constraint.json_schema(schema, tokenizer_from_llama(llama), **options)
        super().__init__(c, max_tokens)


class RegexLogitsProcessor(LogitsProcessor):
    """Output matching ``pattern`` (Rust regex syntax, whole output)."""

    def __init__(self, pattern: str, llama, *, max_tokens: Optional[int] = None):
        super().__init__(_stencil.Constraint.regex(pattern, tokenizer_from_llama(llama)), max_tokens)


class GbnfLogitsProcessor(LogitsProcessor):
    """Output matching a llama.cpp GBNF grammar (start rule ``root``): a drop-in for
    ``LlamaGrammar`` whose outputs also end complete within ``max_tokens``."""

    def __init__(self, grammar: str, llama, *, max_tokens: Optional[int] = None):
        super().__init__(_stencil.Constraint.gbnf(grammar, tokenizer_from_llama(llama)), max_tokens)


class LarkLogitsProcessor(LogitsProcessor):
    """Output matching a Lark grammar (start rule ``start``, ``%json { schema }`` embeds)."""

    def __init__(self, grammar: str, llama, *, max_tokens: Optional[int] = None):
        super().__init__(_stencil.Constraint.lark(grammar, tokenizer_from_llama(llama)), max_tokens)


class ChoiceLogitsProcessor(LogitsProcessor):
    """Output exactly one of ``choices``."""

    def __init__(self, choices: Sequence[str], llama, *, max_tokens: Optional[int] = None):
        super().__init__(_stencil.Constraint.choice(list(choices), tokenizer_from_llama(llama)), max_tokens)
