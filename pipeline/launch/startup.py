"""How an imgrec process starts: its heavy imports without the cyclic garbage collector, then
frozen; TensorFlow's import without Keras; Keras 2 asked for, as TFT needs.

Only processes imgrec owns do this (the `imgrec` program, its DirectRunner and Dask workers, the
Flex Template's launcher). A library caller keeps its own collector, and its TensorFlow loads
Keras as usual. Why each pays, and by how much: docs/DESIGN.md, "Start-up and patches".
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

from pipeline.launch.switches import Switches

__all__ = ["KERAS_ENV", "begin", "defer_keras", "finish", "use_keras_2", "without_gc"]

# TensorFlow Transform works only with Keras 2 (tf_keras); set before TensorFlow's import, it
# keeps TensorFlow from loading Keras 3 too. A value the user set is kept.
KERAS_ENV = "TF_USE_LEGACY_KERAS"
_KERAS_PREFIXES = ("keras.", "tf_keras.")

_started = False  # True while the collector is off because begin() turned it off
_ALL_ON = Switches()  # every patch on: the scripts and tests that start as imgrec does


def begin(switches: Switches = _ALL_ON) -> None:
    """Turn the collector off for the start-up imports (a no-op if it is off already)."""
    global _started
    if gc.isenabled() and switches.patch_on("gc_freeze"):
        gc.disable()
        _started = True


def finish() -> None:
    """The start-up imports are done: freeze what they made (no collection walks it again) and
    turn the collector back on. A no-op unless `begin()` turned it off."""
    global _started
    if _started:
        _started = False
        gc.freeze()
        gc.enable()


@contextlib.contextmanager
def without_gc(switches: Switches = _ALL_ON):
    """`with without_gc(): import ...`: `begin()` on entry, `finish()` on exit."""
    begin(switches)
    try:
        yield
    finally:
        finish()


def use_keras_2() -> None:
    """Ask TensorFlow for Keras 2 only, as TFT needs, unless the user chose (KERAS_ENV)."""
    os.environ.setdefault(KERAS_ENV, "1")


class _DeferKeras:
    """A meta path finder that refuses Keras's submodules while TensorFlow's __init__ runs.

    TensorFlow's __init__ ends by importing Keras inside `try: ... except ImportError` (to
    register optimizers for SavedModels); imgrec never uses Keras there. Top-level packages still
    resolve (`tf.keras` works later), and once `import tensorflow` is done everything loads as
    usual, TFT's own Keras 2 included.
    """

    def find_spec(self, name, path=None, target=None):
        if name.startswith(_KERAS_PREFIXES) and _initializing("tensorflow"):
            raise ModuleNotFoundError(f"imgrec: {name} is not loaded while TensorFlow starts")
        return None


def _initializing(package: str) -> bool:
    """Whether `package`'s __init__ is running (importlib's own flag on the module's spec)."""
    module = sys.modules.get(package)
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def defer_keras(switches: Switches = _ALL_ON) -> None:
    """Before anything imports TensorFlow: its import leaves Keras out (`_DeferKeras`).

    A no-op once TensorFlow is in or the finder is installed.
    """
    if not switches.patch_on("defer_keras") or "tensorflow" in sys.modules:
        return
    if any(isinstance(f, _DeferKeras) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _DeferKeras())
