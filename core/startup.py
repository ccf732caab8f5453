"""A process's start-up: the `imgrec` program and its workers import without the cyclic garbage
collector and compile each of TensorFlow's type-annotation strings once (`_CompileMemo`, below),
TensorFlow's import leaves Keras out (`defer_keras`, below), and the program's import of Beam
leaves out the clients of integrations imgrec does not use (`defer_beam_extras`, below). The
program's work runs above one large frame, so that CPython does not map and unmap its frame
memory over and over (`on_a_roomy_stack`, below).

Importing TensorFlow, Beam and TFT creates ~700,000 long-lived objects the collector tracks
(modules, functions, protos; `gc.get_freeze_count()` after `imgrec verify`'s imports), and
CPython's collector walks all of them again at every full collection it triggers along the way.
With it off until the imports are done, then `gc.freeze()` (the start-up objects move to a
generation no collection walks again) and back on, a process imports the same modules for ~1 s
less CPU (one process each, alternating: 4.1-4.9 s -> 3.0-3.4 s of CPU for `import
tensorflow_transform, apache_beam`; 2.2-2.7 s -> 1.4-1.8 s for a DirectRunner worker's TensorFlow
and stage modules), and every later full collection skips the frozen objects. Whole commands,
`bench/ablations/startup.py --fix gc` (docs/benchmarks.md): the default convert 1.23x, `--no_analyze
--workers 2` 1.52x, verify 1.36x, wall clock. The collector is back on before the command reads
any image (only the options, a manifest and the preflight's listing come before).

Only processes imgrec owns do this: the `imgrec` program (`pipeline.cli.run`, until the command's
work starts), the DirectRunner worker processes it starts (`pipeline.runners.worker_start`, a Beam
plugin), Dask workers started with `--preload pipeline.runners.dask_preload` (run_dask.sh) and the Flex
Template's launcher (templates/flex/main.py). A library caller (`pipeline.cli.main`, the reader
in a training job) keeps its own collector settings, and its TensorFlow loads Keras as usual.
"""

from __future__ import annotations

import builtins
import gc
import sys
import types
import typing

__all__ = [
    "begin",
    "defer_beam_extras",
    "defer_keras",
    "finish",
    "on_a_roomy_stack",
    "without_gc",
]

_started = False  # True while the collector is off because begin() turned it off


def begin() -> None:
    """Turn the collector off for the start-up imports (a no-op if it is off already)."""
    global _started
    if gc.isenabled():
        gc.disable()
        _started = True
        _memoize_forward_refs()


def finish() -> None:
    """The start-up imports are done: freeze what they made and turn the collector back on.

    A no-op unless `begin()` turned it off, so library callers and a second call are safe.
    """
    global _started
    if _started:
        _started = False
        _forget_forward_refs()
        gc.freeze()
        gc.enable()


# TensorFlow's generated op modules (tensorflow/python/ops/gen_*_ops.py) declare 1,470 TypeVars
# whose constraints are strings ("_atypes.Float32", ...); typing makes each a ForwardRef, and a
# ForwardRef compiles its string: `import tensorflow` calls compile() 18,160 times for 169
# distinct strings, ~0.13 s of its ~2.1 s of CPU with the collector off (fresh processes,
# alternating, 3 each: 2.03-2.21 -> 1.91-2.01 s). While begin() holds, typing's compile is a memo
# of the builtin: a code object is immutable, so ForwardRefs of the same string can share one
# (evaluating it reads the code, never changes it). finish() removes it, so nothing of it
# outlives the start-up imports. Measured whole commands: bench/ablations/startup.py
# --fix forward_refs (docs/benchmarks.md).
class _CompileMemo:
    """`compile(source, filename, mode)` with str source, memoized; anything else passes through."""

    def __init__(self) -> None:
        self.codes: dict[tuple[str, str, str], object] = {}

    def __call__(self, source, filename, mode, *args, **kwargs):
        if args or kwargs or not isinstance(source, str):
            return builtins.compile(source, filename, mode, *args, **kwargs)
        key = (source, filename, mode)
        code = self.codes.get(key)
        if code is None:
            code = self.codes[key] = builtins.compile(source, filename, mode)
        return code


def _memoize_forward_refs() -> None:
    """typing's compile (ForwardRef's) memoized until `_forget_forward_refs`."""
    if "compile" not in vars(typing):
        typing.compile = _CompileMemo()


def _forget_forward_refs() -> None:
    """typing back to the builtin compile (if the memo is what it has)."""
    if isinstance(vars(typing).get("compile"), _CompileMemo):
        del typing.compile


class without_gc:  # noqa: N801 - used as a context manager, like contextlib's lower-case ones
    """`with without_gc(): import ...`: `begin()` on entry, `finish()` on exit."""

    def __enter__(self) -> None:
        begin()

    def __exit__(self, *exc) -> None:
        finish()


# TensorFlow's __init__ ends by importing Keras (`tf_keras.src.optimizers` with
# TF_USE_LEGACY_KERAS=1, else `keras.src.optimizers`) inside `try: ... except ImportError`, "so that
# any function/method that needs to happen at load time will trigger, eg registration of
# optimizers in the SavedModel registry": the whole of Keras 2 (or 3), ~1 s of CPU, in every
# process that imports TensorFlow. imgrec never uses Keras: it decodes, reads and writes with
# tf.io / tf.data and loads TFT's export, and `import tensorflow_transform` imports Keras 2 itself
# (tensorflow_transform/keras_lib.py), after TensorFlow, for the runs that analyse. So imgrec's own
# processes refuse that one import: `import tensorflow` takes 2.9-3.0 s of CPU instead of
# 3.9-4.1 s (three fresh processes each, alternating). Measured whole commands:
# `bench/ablations/startup.py --fix keras` (docs/benchmarks.md).
_KERAS_PREFIXES = ("keras.", "tf_keras.")


class _DeferKeras:
    """A meta path finder that refuses Keras's modules while TensorFlow's __init__ is running.

    It refuses only submodules (`tf_keras.src...`): TensorFlow looks the top-level packages up
    (`importlib.util.find_spec("tf_keras")`) to put their API folders on `tf.__path__`, so that
    `tf.keras` still works when someone asks for it later. "Running" is the import system's own
    flag on the module being executed (`__spec__._initializing`, set by importlib around
    `exec_module` since Python 3.4): once `import tensorflow` is done, the finder lets everything
    through, so a later `import tensorflow_transform`, `import tf_keras` or `tf.keras` loads Keras
    as usual. tests/unit/test_startup.py checks all three in a fresh process.
    """

    def find_spec(self, name, path=None, target=None):
        if name.startswith(_KERAS_PREFIXES) and _initializing("tensorflow"):
            raise ModuleNotFoundError(
                f"imgrec: {name} is not loaded while TensorFlow starts (core/startup.py)",
                name=name,
            )
        return None


def _initializing(package: str) -> bool:
    """Whether `package`'s __init__ is running: the import system's own flag on the module being
    executed (`__spec__._initializing`, set by importlib around `exec_module`)."""
    module = sys.modules.get(package)
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def defer_keras() -> None:
    """In imgrec's own processes, before anything imports TensorFlow: TensorFlow's import leaves
    Keras out (`_DeferKeras` above). A no-op once TensorFlow is in or the finder is installed."""
    if "tensorflow" in sys.modules or any(isinstance(f, _DeferKeras) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _DeferKeras())


# `import apache_beam` imports, each inside `try: ... except ImportError`, the client libraries of
# integrations imgrec never uses: pandas (Beam's DataFrame batch types and its CSV/JSON
# transforms; pyarrow still loads, Beam imports it on its own), BigQuery's client and Pub/Sub's.
# ~0.3 s of CPU and ~450 modules (`cli.start_program`, then `import apache_beam`: 1.37 -> 1.09
# s of CPU, medians of 7 fresh processes each, alternating; whole commands:
# bench/ablations/beam_extras.py, docs/benchmarks.md). pymongo and BigQuery's Storage API are
# left in: refusing them makes Beam log a warning ("Could not find a compatible bson package")
# or an INFO line at every start, for 0.06 and 0.03 s. Beam's own modules still load and keep
# their fallbacks for the life of the process (its CSV/JSON transforms raise "Please install
# apache_beam[dataframe]", `pubsub` and BigQuery's client stay None): imgrec uses none of them,
# nor does any runner it runs on (the Dataflow client, google.cloud.dataflow, is left in too).
# IMGREC_BEAM_EXTRAS=1 turns this off.
BEAM_EXTRAS = frozenset({"pandas", "google.cloud.bigquery", "google.cloud.pubsub"})
BEAM_EXTRAS_ENV = "IMGREC_BEAM_EXTRAS"


class _DeferBeamExtras:
    """A meta path finder that refuses BEAM_EXTRAS while Beam's __init__ is running.

    Only while it runs (as `_DeferKeras` for TensorFlow): once `import apache_beam` is done, the
    finder lets everything through, so a later `import pandas` (tfx_bsl's Arrow types in TFT's
    analysis, tf_keras when TFT loads an export) works as usual. tests/unit/test_startup.py checks both in a fresh process.
    """

    def find_spec(self, name, path=None, target=None):
        if name in BEAM_EXTRAS and _initializing("apache_beam"):
            raise ModuleNotFoundError(
                f"imgrec: {name} is not loaded while Beam starts (core/startup.py)", name=name
            )
        return None


def defer_beam_extras() -> None:
    """In imgrec's own programs, before anything imports Beam: Beam's import leaves out the
    clients of integrations imgrec does not use (BEAM_EXTRAS above). A no-op once Beam is in,
    once the finder is installed, or with IMGREC_BEAM_EXTRAS=1."""
    import os

    if (
        "apache_beam" in sys.modules
        or os.environ.get(BEAM_EXTRAS_ENV) == "1"
        or any(isinstance(f, _DeferBeamExtras) for f in sys.meta_path)
    ):
        return
    sys.meta_path.insert(0, _DeferBeamExtras())


# CPython (3.11 on) keeps a thread's Python frames in chunks of 16 KB: a call that does not fit in
# the current chunk maps a new one (mmap), and the return of that chunk's first frame unmaps it
# (munmap). Imports nest ~100 frames deep, and so do Beam's bundles: wherever the stack's depth
# goes back and forth across a chunk's end, each crossing costs an mmap and an munmap, ~7 us here
# (a recursion timed either side of the boundary). strace counts ~10,000 such pairs in one
# `import tensorflow`, and ~10,000-24,000 in the main thread of a default conversion of 40 photos.
# A chunk is made big enough for the frame that needs it (16 KB doubled until the frame fits, with
# 1,000 slots to spare): a frame of 16,500 slots (132 KB) gets a 256 KB chunk, and the frames it
# calls fill the ~120 KB left (~1,000 frames) before any new chunk is needed. The slots are a
# function's value-stack size, which nothing reads beyond what the function's code pushes (one
# call). With it, that conversion's main thread mapped 2 chunks instead of ~9,500, and the command
# took 0.66 s of system CPU instead of 0.80 s (medians of 6, alternating); whole commands
# `bench/ablations/startup.py --fix roomy_stack` (docs/benchmarks.md): default convert 1.12x.
_ROOMY_SLOTS = 16_500


def _call(fn, args, kwargs):
    return fn(*args, **kwargs)


def _make_roomy_call():
    """`_call` with _ROOMY_SLOTS more value-stack slots; None where the interpreter will not
    make one (not CPython)."""
    if sys.implementation.name != "cpython":
        return None
    code = _call.__code__
    try:
        return types.FunctionType(
            code.replace(co_stacksize=code.co_stacksize + _ROOMY_SLOTS), globals(), "_call"
        )
    except (AttributeError, TypeError, ValueError):
        return None


_roomy_call = _make_roomy_call()  # made once: every test's protocol goes through it


def on_a_roomy_stack(fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, called from a frame whose stack chunk leaves ~120 KB of room.

    For the whole of a process's work (the `imgrec` program's `main`) or its heavy imports; the
    result and any exception are fn's. Where the interpreter will not make such a frame (not
    CPython), fn is simply called.
    """
    if _roomy_call is None:
        return fn(*args, **kwargs)
    return _roomy_call(fn, args, kwargs)
