"""What each `--runner` name means to imgrec: one definition, read by the launch and the stages.

Beam matches runner names case-insensitively, with or without the "Runner" suffix, and also takes
a class's full module path; these helpers do the same. Beam-free.
"""

from __future__ import annotations

__all__ = ["is_direct_runner", "is_local_runner", "runner_key"]

# Beam's DirectRunner under its names (DirectRunner is an alias of SwitchingDirectRunner): the
# runner imgrec replaces with its own FnApiRunner set-up (pipeline/runners/direct.py).
_DIRECT = frozenset({"direct", "switchingdirect"})
# Runners whose workers all run on this machine and share its disk and temp dir.
_LOCAL = _DIRECT | {"bundlebaseddirect", "testdirect", "prism", "interactive"}


def runner_key(runner: object) -> str:
    """A --runner value as Beam compares it: its last dotted part, lower case, no "runner"."""
    name = str(runner).rsplit(".", 1)[-1].lower()
    return name.removesuffix("runner")


def is_direct_runner(runner: object) -> bool:
    """Whether a --runner value (None: Beam's default) names Beam's DirectRunner."""
    return runner is None or runner_key(runner) in _DIRECT


def is_local_runner(runner: object) -> bool:
    """Whether a --runner value (None: Beam's default) runs its workers on this machine."""
    return runner is None or runner_key(runner) in _LOCAL
