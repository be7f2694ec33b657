"""Exceptions raised by stencil. Every one is a ``StencilError``."""


class StencilError(Exception):
    """Base class of stencil's errors."""


class SchemaError(StencilError, ValueError):
    """A constraint that does not compile.

    ``keyword`` is the JSON Schema keyword at fault (or None), ``pointer`` the JSON pointer
    into the schema where it is (or None), ``reason`` what is wrong.
    """

    keyword = None
    pointer = None
    reason = None


class BudgetError(StencilError, ValueError):
    """``max_tokens`` is smaller than the shortest output the constraint accepts.

    ``min_tokens`` is that shortest output's length in tokens (None when the constraint
    cannot be completed at all), ``max_tokens`` the budget asked for.
    """

    min_tokens = None
    max_tokens = None


class MaskError(StencilError, RuntimeError):
    """A matcher step failed: a limit of the automaton, a rollback too far, a bitmask that
    does not fit."""
