"""The marker of imgrec's own job-stopping errors.

A DoFn that must stop the job raises an exception whose message starts with ERROR_PREFIX; Beam
wraps it in its own traceback text, and the launcher finds the prefix there and prints only our
line (see launcher._beam_error_line).
"""

from __future__ import annotations

__all__ = ["ERROR_PREFIX", "interrupted"]

ERROR_PREFIX = "imgrec-error: "


def interrupted(error: BaseException) -> bool:
    """Whether `error` is Ctrl-C: a KeyboardInterrupt, or one a DoFn got that Beam re-raised as
    `RuntimeError('KeyboardInterrupt [while running ...]')` (its chain or its message says so)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KeyboardInterrupt) or str(error).startswith("KeyboardInterrupt"):
            return True
        error = error.__cause__ or error.__context__
    return False
