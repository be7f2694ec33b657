"""Token bitmasks: ``int32`` arrays of shape ``[batch, ceil(vocab_size / 32)]``, bit ``i % 32``
of word ``i // 32`` set when token ``i`` is allowed (the layout XGrammar and llguidance use),
and applying them to logits (numpy arrays or torch tensors on any device)."""

from typing import Any, Optional, Sequence

import numpy as np

from stencil import _stencil


def bitmask_words(vocab_size: int) -> int:
    """Words (int32) in one bitmask row for ``vocab_size`` tokens."""
    return (vocab_size + 31) // 32


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> np.ndarray:
    """A new bitmask with every token allowed: ``np.int32`` of shape
    ``[batch_size, ceil(vocab_size / 32)]``."""
    if batch_size < 0 or vocab_size <= 0:
        raise ValueError(f"batch_size={batch_size}, vocab_size={vocab_size}: need batch_size >= 0 and vocab_size > 0")
    return np.full((batch_size, bitmask_words(vocab_size)), -1, dtype=np.int32)


def text_budget(max_tokens: Optional[int]) -> Optional[int]:
    """The matcher budget for an engine's ``max_tokens`` (transformers' ``max_new_tokens``,
    vLLM's and llama.cpp's ``max_tokens``), which count the end-of-sequence token too: one
    less, so the output is complete AND its end-of-sequence fits."""
    if max_tokens is None:
        return None
    if max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens}: need at least 1")
    return max_tokens - 1


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def fill_next_token_bitmasks(
    matchers: Sequence["_stencil.Matcher"], bitmask: Any, indices: Optional[Sequence[int]] = None
) -> None:
    """Fills row ``indices[i]`` (default ``i``) of ``bitmask`` for every ``matchers[i]``, in
    parallel with the GIL released. ``bitmask`` may be a numpy array or a torch tensor on
    any device (a device tensor is filled through a CPU copy)."""
    indices = list(indices) if indices is not None else None
    if _is_torch(bitmask) and bitmask.device.type != "cpu":
        staging = bitmask.to("cpu")
        _stencil.fill_next_token_bitmasks(list(matchers), staging, indices)
        bitmask.copy_(staging, non_blocking=False)
        return
    _stencil.fill_next_token_bitmasks(list(matchers), bitmask, indices)


def unpack_bitmask(bitmask: Any, vocab_size: int):
    """The bitmask as booleans of shape ``[batch, vocab_size]`` (True = allowed), in the
    bitmask's own library (numpy or torch) and device."""
    if _is_torch(bitmask):
        import torch

        shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
        bits = (bitmask.unsqueeze(-1) >> shifts) & 1
        return bits.reshape(*bitmask.shape[:-1], -1)[..., :vocab_size].bool()
    words = np.ascontiguousarray(bitmask, dtype=np.int32)
    bits = np.unpackbits(words.view(np.uint8), axis=-1, bitorder="little")
    return bits[..., :vocab_size].astype(bool)


def apply_token_bitmask(logits: Any, bitmask: Any, indices: Optional[Sequence[int]] = None):
    """Sets the logits of forbidden tokens to ``-inf``, in place, and returns ``logits``.

    ``logits``: ``[batch, vocab]`` (or ``[vocab]`` with a one-row mask), numpy or torch;
    ``bitmask`` row ``i`` applies to logits row ``indices[i]`` (default ``i``). Columns past
    the mask's width (a model vocabulary padded beyond the tokenizer) are forbidden."""
    vocab = logits.shape[-1]
    one_row = len(logits.shape) == 1
    rows = logits.reshape(1, vocab) if one_row else logits
    if _is_torch(logits):
        import torch

        mask = bitmask if _is_torch(bitmask) else torch.from_numpy(np.ascontiguousarray(bitmask))
        mask = mask.to(logits.device).reshape(-1, mask.shape[-1])
        allowed = unpack_bitmask(mask, min(vocab, mask.shape[-1] * 32))
        if allowed.shape[-1] < vocab:
            pad = torch.zeros(allowed.shape[0], vocab - allowed.shape[-1], dtype=torch.bool, device=logits.device)
            allowed = torch.cat([allowed, pad], dim=-1)
        target = rows if indices is None else rows[list(indices)]
        target = target.masked_fill(~allowed[: target.shape[0]], float("-inf"))
        if indices is None:
            rows.copy_(target)
        else:
            rows[list(indices)] = target
        return logits
    mask = np.asarray(bitmask).reshape(-1, np.asarray(bitmask).shape[-1])
    allowed = unpack_bitmask(mask, min(vocab, mask.shape[-1] * 32))
    if allowed.shape[-1] < vocab:
        allowed = np.pad(allowed, ((0, 0), (0, vocab - allowed.shape[-1])))
    idx = list(range(allowed.shape[0])) if indices is None else list(indices)
    for k, r in enumerate(idx):
        rows[r][~allowed[k]] = -np.inf
    return logits
