"""Logits processors for Hugging Face ``transformers``' ``generate()``.

::

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from stencil.hf import JsonSchemaLogitsProcessor

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    proc = JsonSchemaLogitsProcessor(schema, tok, vocab_size=model.config.vocab_size, max_tokens=200)
    out = model.generate(**tok(prompt, return_tensors="pt"), logits_processor=[proc], max_new_tokens=200)

One processor serves one ``generate()`` call (any batch size: one matcher per row); make a new
one, or call ``reset()``, for the next call. With ``max_tokens`` equal to ``max_new_tokens``
every output ends complete within the budget (the model must still produce end-of-sequence,
which the mask allows exactly when the output is complete).
"""

from typing import Any, List, Optional, Sequence

from stencil import _stencil
from stencil.bitmask import allocate_token_bitmask, apply_token_bitmask, fill_next_token_bitmasks, text_budget
from stencil.errors import MaskError

try:  # a real subclass when transformers is there; plain callable otherwise
    from transformers import LogitsProcessor as _Base
except ImportError:  # pragma: no cover - transformers is optional
    _Base = object


def as_tokenizer(tokenizer: Any, vocab_size: Optional[int] = None, eos_ids: Optional[Sequence[int]] = None):
    """A ``stencil.Tokenizer`` as is, or one built from a ``transformers`` fast tokenizer."""
    if isinstance(tokenizer, _stencil.Tokenizer):
        return tokenizer
    return _stencil.Tokenizer.from_hf(tokenizer, vocab_size=vocab_size, eos_ids=list(eos_ids) if eos_ids else None)


class StencilLogitsProcessor(_Base):
    """Masks every token the constraint forbids, for each row of the batch.

    ``max_tokens``: the token budget of the output (use ``max_new_tokens``); tokens after
    which the output could not be completed within it are masked too.
    """

    def __init__(self, constraint: "_stencil.Constraint", max_tokens: Optional[int] = None):
        self.constraint = constraint
        self.max_tokens = max_tokens
        self.reset()

    def reset(self) -> None:
        """Forgets the sequences of the last ``generate()`` call."""
        self.matchers: List[_stencil.Matcher] = []
        self._prompt_len: Optional[int] = None
        self._bitmask = None

    def __call__(self, input_ids, scores):
        batch, length = input_ids.shape
        if self._prompt_len is None:
            self._prompt_len = length
            self.matchers = [self.constraint.matcher(max_tokens=text_budget(self.max_tokens)) for _ in range(batch)]
            self._bitmask = allocate_token_bitmask(batch, self.constraint.vocab_size)
        elif len(self.matchers) != batch:
            raise ValueError(
                f"the batch changed from {len(self.matchers)} to {batch} rows between steps; "
                "call reset() (or use a new processor) for each generate() call"
            )
        else:
            last = input_ids[:, -1].tolist()
            for row, (m, tok) in enumerate(zip(self.matchers, last)):
                if m.is_terminated():
                    continue  # finished rows are padded by generate(); nothing to check
                if not m.accept_token(tok):
                    raise MaskError(
                        f"row {row}: token {tok} was generated although the constraint forbids it "
                        "(another processor or a forced token overrode the mask)"
                    )
        live = [i for i, m in enumerate(self.matchers) if not m.is_terminated()]
        self._bitmask.fill(-1)
        if live:
            fill_next_token_bitmasks([self.matchers[i] for i in live], self._bitmask, live)
        return apply_token_bitmask(scores, self._bitmask)


class JsonSchemaLogitsProcessor(StencilLogitsProcessor):
    """Output valid under ``schema`` (str or dict); ``tokenizer``: a ``transformers`` fast
    tokenizer or a ``stencil.Tokenizer``; further keywords go to
    ``stencil.Constraint.json_schema``."""

    def __init__(self, schema, tokenizer, *, vocab_size=None, eos_ids=None, max_tokens=None, **options):
        tok = as_tokenizer(tokenizer, vocab_size, eos_ids)
        super().__init__(_stencil.Constraint.json_schema(schema, tok, **options), max_tokens)


class RegexLogitsProcessor(StencilLogitsProcessor):
    """Output matching ``pattern`` (Rust regex syntax, whole output)."""

    def __init__(self, pattern: str, tokenizer, *, vocab_size=None, eos_ids=None, max_tokens=None):
        tok = as_tokenizer(tokenizer, vocab_size, eos_ids)
        super().__init__(_stencil.Constraint.regex(pattern, tok), max_tokens)


class ChoiceLogitsProcessor(StencilLogitsProcessor):
    """Output exactly one of ``choices``."""

    def __init__(self, choices: Sequence[str], tokenizer, *, vocab_size=None, eos_ids=None, max_tokens=None):
        tok = as_tokenizer(tokenizer, vocab_size, eos_ids)
        super().__init__(_stencil.Constraint.choice(list(choices), tok), max_tokens)
