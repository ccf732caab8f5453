"""A process's start-up without the cyclic garbage collector: the `imgrec` program and its workers.

Importing TensorFlow, Beam and TFT creates ~700,000 long-lived objects the collector tracks
(modules, functions, protos; `gc.get_freeze_count()` after `imgrec verify`'s imports), and
CPython's collector walks all of them again at every full collection it triggers along the way.
With it off until the imports are done, then `gc.freeze()` (the start-up objects move to a
generation no collection walks again) and back on, a process imports the same modules for ~1 s
less CPU (one process each, alternating: 4.1-4.9 s -> 3.0-3.4 s of CPU for `import
tensorflow_transform, apache_beam`; 2.2-2.7 s -> 1.4-1.8 s for a DirectRunner worker's TensorFlow
and stage modules), and every later full collection skips the frozen objects. Whole commands,
`bench/startup.py --fix gc` (docs/benchmarks.md): the default convert 1.23x, `--no_analyze
--workers 2` 1.52x, verify 1.36x, wall clock. The collector is back on before the command reads
any image (only the options, a manifest and the preflight's listing come before).

Only processes imgrec owns do this: the `imgrec` program (`pipeline.cli.run`, until the command's
work starts), the DirectRunner worker processes it starts (`pipeline.worker_start`, a Beam
plugin), Dask workers started with `--preload pipeline.worker_start` (run_dask.sh) and the Flex
Template's launcher (templates/flex/main.py). A library caller (`pipeline.cli.main`, the reader
in a training job) keeps its own collector settings.
"""

from __future__ import annotations

import gc

__all__ = ["begin", "finish", "without_gc"]

_started = False  # True while the collector is off because begin() turned it off


def begin() -> None:
    """Turn the collector off for the start-up imports (a no-op if it is off already)."""
    global _started
    if gc.isenabled():
        gc.disable()
        _started = True


def finish() -> None:
    """The start-up imports are done: freeze what they made and turn the collector back on.

    A no-op unless `begin()` turned it off, so library callers and a second call are safe.
    """
    global _started
    if _started:
        _started = False
        gc.freeze()
        gc.enable()


class without_gc:  # noqa: N801 - used as a context manager, like contextlib's lower-case ones
    """`with without_gc(): import ...`: `begin()` on entry, `finish()` on exit."""

    def __enter__(self) -> None:
        begin()

    def __exit__(self, *exc) -> None:
        finish()
