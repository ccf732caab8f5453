"""The marker of imgrec's own job-stopping errors.

A DoFn that must stop the job raises an exception whose message starts with ERROR_PREFIX; Beam
wraps it in its own traceback text, and the launcher finds the prefix there and prints only our
line (see launcher._beam_error_line).
"""

from __future__ import annotations

__all__ = ["ERROR_PREFIX"]

ERROR_PREFIX = "imgrec-error: "
