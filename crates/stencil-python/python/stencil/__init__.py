"""stencil: grammar-constrained decoding masks for local and served models.

Compile a constraint (JSON Schema, regex, choices, any JSON, tool calls) once per tokenizer,
then give each sequence a matcher that fills rows of a token bitmask::

    import stencil
    tok = stencil.Tokenizer.from_file("tokenizer.json")
    c = stencil.Constraint.json_schema({"type": "integer"}, tok)
    m = c.matcher(max_tokens=16)
    mask = stencil.allocate_token_bitmask(1, tok.vocab_size)
    m.fill_next_token_bitmask(mask)      # bit i % 32 of word i // 32: token i allowed
    stencil.apply_token_bitmask(logits, mask)
    m.accept_token(sampled_id)

Adapters: ``stencil.hf`` (transformers ``generate``), ``stencil.llama_cpp``
(llama-cpp-python), ``stencil.vllm`` (vLLM logits processor).
"""

from stencil._stencil import Constraint, Matcher, Tokenizer, __version__
from stencil.bitmask import (
    allocate_token_bitmask,
    apply_token_bitmask,
    bitmask_words,
    fill_next_token_bitmasks,
    unpack_bitmask,
)
from stencil.errors import BudgetError, MaskError, SchemaError, StencilError

__all__ = [
    "Tokenizer",
    "Constraint",
    "Matcher",
    "allocate_token_bitmask",
    "apply_token_bitmask",
    "bitmask_words",
    "fill_next_token_bitmasks",
    "unpack_bitmask",
    "StencilError",
    "SchemaError",
    "BudgetError",
    "MaskError",
    "__version__",
]
