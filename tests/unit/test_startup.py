"""core/startup.py: the program's start-up without the garbage collector, in process."""

from __future__ import annotations

import gc
import types
import typing

import pytest

from core import startup


@pytest.fixture
def collector():
    """Leaves the collector on and startup's own state clear, whatever the test did."""
    was = gc.isenabled()
    yield
    startup._started = False
    startup._forget_forward_refs()
    gc.enable() if was else gc.disable()


def test_begin_turns_the_collector_off_and_finish_freezes_and_turns_it_back_on(collector):
    gc.enable()
    startup.begin()
    assert not gc.isenabled()
    made = [[i] for i in range(1000)]  # tracked objects made during the start-up
    frozen = gc.get_freeze_count()
    startup.finish()
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)
    startup.finish()  # a second finish changes nothing
    assert gc.isenabled()


def test_finish_without_begin_leaves_a_callers_collector_as_it_is(collector):
    """Library callers (cli.main in a test or a script) never call begin(): their settings stay."""
    gc.disable()
    startup.finish()
    assert not gc.isenabled()
    gc.enable()
    made = [[i] for i in range(1000)]  # tracked objects a freeze here would take in
    frozen = gc.get_freeze_count()
    startup.finish()
    # No freeze: the count did not grow. (It can shrink: a frozen object that another thread of
    # this test process frees, e.g. an earlier test's Beam or TensorFlow thread, leaves the
    # permanent generation; seen once in a fast-tier run, 46 fewer.)
    assert gc.isenabled() and gc.get_freeze_count() <= frozen, len(made)


def test_begin_with_the_collector_already_off_does_not_turn_it_on_later(collector):
    gc.disable()
    startup.begin()
    startup.finish()
    assert not gc.isenabled()


def test_without_gc_is_begin_then_finish(collector):
    gc.enable()
    with startup.without_gc():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_forward_refs_share_their_compiled_string_only_during_the_start_up(collector):
    """begin() to finish(): a ForwardRef's string is compiled once (TensorFlow's generated op
    modules declare 1,470 TypeVars over 169 distinct strings), and the shared code evaluates as its
    own would; after finish(), and in a process whose collector was already off (a library
    caller's), typing compiles each one again."""
    gc.enable()
    startup.begin()
    names = ("_atypes.Float32", "_atypes.Int64")  # as tensorflow/python/ops/gen_*_ops.py has
    tv, again = typing.TypeVar("TV_Example", *names), typing.TypeVar("TV_Again", *names)
    pairs = zip(tv.__constraints__, again.__constraints__, strict=True)
    assert all(x.__forward_code__ is y.__forward_code__ for x, y in pairs)
    atypes = types.SimpleNamespace(Float32=float, Int64=int)
    assert [eval(c.__forward_code__, {"_atypes": atypes}) for c in tv.__constraints__] == [
        float,
        int,
    ]
    # Other calls (flags, an AST) go to the builtin as they are.
    assert eval(typing.compile("1 + 1", "<x>", "eval", dont_inherit=True)) == 2
    startup.finish()
    assert "compile" not in vars(typing)
    a, b = typing.ForwardRef("_atypes.Float32"), typing.ForwardRef("_atypes.Float32")
    assert a.__forward_code__ is not b.__forward_code__
    gc.disable()
    startup.begin()
    assert "compile" not in vars(typing)


_DEFERRED = """
import json, os, sys
from core import startup
startup.defer_keras()
startup.defer_keras()  # a second call installs nothing more
finders = sum(isinstance(f, startup._DeferKeras) for f in sys.meta_path)
{start}
import tensorflow as tf
out = {{"finders": finders, "with_tensorflow": sorted(
    m for m in sys.modules if m.split(".")[0] in ("keras", "tf_keras"))}}
# TensorFlow still put Keras 2's API folder on its path, and Keras loads when asked for.
out["tf_path_has_keras"] = any("tf_keras" in str(p) for p in tf.__path__)
import tf_keras
out["tf_keras"] = tf_keras.layers.Dense(2)(tf.ones([1, 3])).shape == (1, 2)
out["tf.keras"] = tf.keras.layers.Dense is tf_keras.layers.Dense
print(json.dumps(out))
"""


@pytest.mark.e2e  # a fresh TensorFlow process (the import under test can happen only once)
@pytest.mark.parametrize(
    "start", ["", "import pipeline.runners.worker_start"], ids=["program", "worker"]
)
def test_tensorflow_loads_without_keras_and_keras_loads_later(start):
    """startup.defer_keras: a fresh process's `import tensorflow` (the program's, or the worker
    start-up plugin's) loads no Keras module; `import tf_keras` and `tf.keras` work afterwards.
    Fails loudly if TensorFlow ever needs Keras at import (the import would raise)."""
    from tests.runs import script_facts

    got = script_facts(_DEFERRED.format(start=start), timeout=300, TF_USE_LEGACY_KERAS="1")
    assert got == {"finders": 1, "with_tensorflow": [], "tf_path_has_keras": True,
                   "tf_keras": True, "tf.keras": True}  # fmt: skip


# (finder, the package whose import it watches, names it refuses then, names it lets through,
# the words of its refusal)
_FINDERS = {
    "keras": (
        startup._DeferKeras, "tensorflow",
        ("tf_keras.src.optimizers", "keras.src.optimizers", "keras._tf_keras"),
        ("tf_keras", "keras", "tensorflow.python.keras", "kerasx.y"),
        "not loaded while TensorFlow starts",
    ),
    "beam extras": (
        startup._DeferBeamExtras, "apache_beam", tuple(sorted(startup.BEAM_EXTRAS)),
        ("google.cloud.storage", "google.cloud.dataflow", "pyarrow", "pandas.core", "pymongo"),
        "not loaded while Beam starts",
    ),
}  # fmt: skip


@pytest.mark.parametrize("which", sorted(_FINDERS))
def test_a_finder_refuses_only_its_names_and_only_while_its_package_initialises(which, monkeypatch):
    """Outside the package's import (always so in this test process) a finder lets every name
    through; inside it, only its names are refused (for Keras: only its submodules, never the
    packages TensorFlow looks up)."""
    import sys
    import types

    make, package, refused, allowed, words = _FINDERS[which]
    finder = make()
    assert finder.find_spec(refused[0]) is None  # the package is imported already
    spec = types.SimpleNamespace(_initializing=True)
    monkeypatch.setitem(sys.modules, package, types.SimpleNamespace(__spec__=spec))
    for name in refused:
        with pytest.raises(ModuleNotFoundError, match=words):
            finder.find_spec(name)
    for name in allowed:
        assert finder.find_spec(name) is None, name
    spec._initializing = False
    assert finder.find_spec(refused[0]) is None


_BEAM_EXTRAS = """
import json, sys
from pipeline.cli import start_program
from core import startup
start_program()  # as the `imgrec` program starts
startup.defer_beam_extras()  # a second call installs nothing more
finders = sum(isinstance(f, startup._DeferBeamExtras) for f in sys.meta_path)
import apache_beam as beam
from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.testing.util import assert_that, equal_to
from core.beam_compat import DirectRunner
out = {"finders": finders, "loaded": sorted(m for m in startup.BEAM_EXTRAS if m in sys.modules)}
# Beam's filesystems for every store imgrec reads are registered, and a pipeline runs on
# imgrec's DirectRunner (the FnApiRunner, as a conversion runs).
out["schemes"] = sorted(c.scheme() for c in FileSystem.get_all_subclasses() if c.scheme())
with beam.Pipeline(runner=DirectRunner()) as p:
    assert_that(p | beam.Create([1, 2]) | beam.Map(lambda x: x * 3), equal_to([3, 6]))
# Once Beam is in, the clients load when someone asks (tfx_bsl asks for pandas).
import pandas
out["pandas_later"] = hasattr(pandas, "DataFrame")
print(json.dumps(out))
"""


@pytest.mark.e2e  # a fresh Beam process (the import under test can happen only once)
@pytest.mark.parametrize("switch", ["", "1"], ids=["default", "off"])
def test_beam_starts_without_the_clients_imgrec_does_not_use(switch):
    """startup.defer_beam_extras, in a fresh process started as the `imgrec` program starts
    (`cli.start_program`): `import apache_beam` loads none of BEAM_EXTRAS (IMGREC_BEAM_EXTRAS=1
    loads them, as without imgrec), GCS and S3 are still registered, a pipeline runs on imgrec's
    DirectRunner, and pandas imports afterwards."""
    from tests.runs import script_facts

    got = script_facts(_BEAM_EXTRAS, timeout=300, **{startup.BEAM_EXTRAS_ENV: switch})
    assert {"gs", "s3"} <= set(got.pop("schemes"))
    loaded = sorted(startup.BEAM_EXTRAS) if switch else []
    assert got == {"finders": 0 if switch else 1, "loaded": loaded, "pandas_later": True}


def test_a_roomy_stack_calls_the_function_from_one_large_frame():
    """on_a_roomy_stack returns fn's result (or raises its exception), and fn's caller is a frame
    of ~16,500 slots: the frame that makes CPython give the calls above it a 256 KB chunk."""
    import sys

    def where(a, b=0):
        caller = sys._getframe(1)
        return a + b, caller.f_code.co_stacksize, caller.f_code.co_name

    total, slots, name = startup.on_a_roomy_stack(where, 2, b=3)
    assert total == 5
    assert name == "_call" and slots >= startup._ROOMY_SLOTS

    def fails():
        raise KeyError("kept")

    with pytest.raises(KeyError, match="kept"):
        startup.on_a_roomy_stack(fails)


def test_a_roomy_stack_elsewhere_than_cpython_is_a_plain_call(monkeypatch):
    import sys

    monkeypatch.setattr(sys.implementation, "name", "pypy")
    assert startup._make_roomy_call() is None
    monkeypatch.setattr(startup, "_roomy_call", startup._make_roomy_call())
    assert startup.on_a_roomy_stack(lambda: sys._getframe(1).f_code.co_name) != "_call"
