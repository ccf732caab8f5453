"""pipeline/core/startup.py: the program's start-up without the garbage collector, in process."""

from __future__ import annotations

import gc

import pytest

from pipeline.core import startup


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
    frozen = gc.get_freeze_count()
    startup.finish()
    assert gc.isenabled() and gc.get_freeze_count() == frozen


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
