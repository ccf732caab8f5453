"""The switchboard: every `IMGREC_*` environment variable, read here once at a process's start.

The rest of imgrec takes these as values (the launch hands them on; DoFns get theirs through
their constructors), so no other module reads the environment for imgrec's own settings. Most
are A/B switches for the benchmarks (bench/ablations/); docs/options.md documents the others.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

__all__ = ["ENV", "Switches", "read_switches"]

# The variables, by the field of Switches each one sets.
ENV = {
    "verbose": "IMGREC_VERBOSE",  # 1: as -v (other libraries' logs on the terminal)
    "log_dir": "IMGREC_LOG_DIR",  # where quiet runs write their logs
    "progress_every_s": "IMGREC_PROGRESS_EVERY_S",  # the plain progress line's period
    "patches_off": "IMGREC_PATCHES_OFF",  # patch names to leave out, or "all"
    "analysis_process": "IMGREC_ANALYSIS_PROCESS",  # 0: TFT in the job's own stages
    "forked_workers": "IMGREC_FORKED_WORKERS",  # 0: Beam's own worker processes
    "type_inference": "IMGREC_BEAM_TYPE_INFERENCE",  # 1: Beam's construction-time inference
    "exact_statistics": "IMGREC_EXACT_STATISTICS",  # 0: statistics read back from TFT's export
    # The test suite's own knobs, kept as given (tests/runs.py parses them).
    "fuzz_seed": "IMGREC_FUZZ_SEED",  # a fuzz test's seed, to replay a failure
    "fuzz_budget_s": "IMGREC_FUZZ_BUDGET_S",  # seconds of tests/unit/test_fuzz.py's loop
}
# Without IMGREC_PROGRESS_EVERY_S: a plain progress line (off a terminal) this often, so CI
# logs stay short.
_PROGRESS_EVERY_S = 10.0


@dataclasses.dataclass(frozen=True)
class Switches:
    """imgrec's environment settings, as values."""

    verbose: bool = False
    log_dir: str | None = None
    progress_every_s: float = _PROGRESS_EVERY_S
    patches_off: frozenset[str] = frozenset()
    analysis_process: bool = True
    forked_workers: bool = True
    type_inference: bool = False
    exact_statistics: bool = True
    fuzz_seed: str = ""
    fuzz_budget_s: str = ""

    def patch_on(self, patch: str) -> bool:
        """Whether `patch` (a name in docs/DESIGN.md's table) is not switched off."""
        return patch not in self.patches_off and "all" not in self.patches_off


def read_switches(environ: Mapping[str, str] | None = None) -> Switches:
    """The switches `environ` (default: this process's environment) sets."""
    env = os.environ if environ is None else environ

    def get(field: str) -> str:
        return env.get(ENV[field], "").strip()

    try:
        every = float(get("progress_every_s") or _PROGRESS_EVERY_S)
    except ValueError:
        every = _PROGRESS_EVERY_S
    return Switches(
        verbose=get("verbose") not in ("", "0"),
        log_dir=get("log_dir") or None,
        progress_every_s=every,
        patches_off=frozenset(p.strip() for p in get("patches_off").split(",") if p.strip()),
        analysis_process=get("analysis_process") != "0",
        forked_workers=get("forked_workers") != "0",
        type_inference=get("type_inference") == "1",
        exact_statistics=get("exact_statistics") != "0",
        fuzz_seed=get("fuzz_seed"),
        fuzz_budget_s=get("fuzz_budget_s"),
    )
