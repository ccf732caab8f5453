"""pipeline/launch/startup.py: the start-up without the garbage collector, and TensorFlow's
import without Keras."""

from __future__ import annotations

import gc

import pytest

from pipeline.launch import startup


@pytest.fixture
def collector():
    """Leaves the collector on and startup's own state clear, whatever the test did."""
    was = gc.isenabled()
    yield
    startup._started = False
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


# (finder, the package whose import it watches, names it refuses then, names it lets through,
# the words of its refusal)
_FINDERS = {
    "keras": (
        startup._DeferKeras, "tensorflow",
        ("tf_keras.src.optimizers", "keras.src.optimizers", "keras._tf_keras"),
        ("tf_keras", "keras", "tensorflow.python.keras", "kerasx.y"),
        "not loaded while TensorFlow starts",
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
