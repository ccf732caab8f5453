"""The private Beam APIs wrapped in core/beam_compat.py still do what imgrec relies on.

A Beam upgrade that renames or changes them fails here, naming the API, instead of as shards
TensorFlow cannot read or an option error nobody understands.
"""

from __future__ import annotations

import argparse
import base64
import io

import pytest

from core import beam_compat

RECORDS = [b"", b"x", b"imgrec" * 1000, bytes(range(256))]


def _tf_written(tmp_path) -> bytes:
    tf = pytest.importorskip("tensorflow")
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for r in RECORDS:
            w.write(r)
    with open(path, "rb") as f:
        return f.read()


def test_write_record_frames_exactly_as_tensorflow_does(tmp_path):
    out = io.BytesIO()
    for r in RECORDS:
        beam_compat.write_record(out, r)
    assert out.getvalue() == _tf_written(tmp_path)


def test_read_record_reads_tensorflow_records_then_none(tmp_path):
    f = io.BytesIO(_tf_written(tmp_path))
    assert [beam_compat.read_record(f) for _ in RECORDS] == RECORDS
    assert beam_compat.read_record(f) is None


@pytest.mark.parametrize("where", [3, 10, 12, 15])  # length, its crc, the data, its crc
def test_read_record_refuses_damage_with_value_error(tmp_path, where):
    data = bytearray(_tf_written(tmp_path)[16 : 16 + 17])  # the record b"x"
    data[where] ^= 0x01
    with pytest.raises(ValueError, match="Not a valid TFRecord"):
        beam_compat.read_record(io.BytesIO(bytes(data)))


def test_beam_argument_parser_takes_every_registered_option_class():
    from apache_beam.options.pipeline_options import PipelineOptions

    import pipeline.options  # noqa: F401  (registers ConvertOptions)

    assert issubclass(beam_compat.BeamArgumentParser, argparse.ArgumentParser)
    parser = beam_compat.BeamArgumentParser(allow_abbrev=False)
    classes = {str(cls): cls for cls in PipelineOptions.__subclasses__()}  # as the launcher does
    for cls in classes.values():
        cls._add_argparse_args(parser)  # some of Beam's call add_value_provider_argument
    known, _ = parser.parse_known_args(["--runner", "DirectRunner", "--output", "out"])
    assert known.runner == "DirectRunner" and known.output == "out"


def test_dofn_output_handler_routes_outputs_to_receivers():
    from apache_beam.runners.common import Receiver
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.windowed_value import WindowedValue

    got = []

    class Collect(Receiver):
        def receive(self, windowed_value):
            got.append(windowed_value.value)

    handler = beam_compat.dofn_output_handler(None, Collect(), {})
    element = WindowedValue("in", 0, (GlobalWindow(),))
    handler.handle_process_outputs(element, iter(["a", "b"]))
    assert got == ["a", "b"]


def test_side_input_view_rebuilds_the_view():
    import apache_beam as beam
    from apache_beam.transforms.sideinputs import SideInputMap
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.windowed_value import WindowedValue

    p = beam.Pipeline()
    side = beam.pvalue.AsList(p | beam.Create([1, 2]))
    view_class, options = beam_compat.side_input_view(side)
    assert view_class is beam.pvalue.AsList and isinstance(options, dict)
    values = [WindowedValue(v, 0, (GlobalWindow(),)) for v in (1, 2)]
    assert list(SideInputMap(view_class, options, values)[GlobalWindow()]) == [1, 2]


def test_pop_dask_bag_kwargs_takes_the_bag_arguments_out():
    pytest.importorskip("dask")
    options = {"npartitions": 4, "partition_size": 16, "address": "tcp://127.0.0.1:1"}
    assert beam_compat.pop_dask_bag_kwargs(options) == {"npartitions": 4, "partition_size": 16}
    assert options == {"address": "tcp://127.0.0.1:1"}


def test_dofn_specs_are_computed_once_per_dofn_and_stay_correct():
    import apache_beam as beam
    from apache_beam.coders import VarIntCoder
    from apache_beam.transforms import userstate

    beam_compat.install()
    beam_compat.memoize_dofn_specs()  # idempotent: still one layer over Beam's function
    assert not hasattr(userstate.get_dofn_specs.__wrapped__, "_imgrec_memoized")
    spec = userstate.BagStateSpec("seen", VarIntCoder())
    walks = []

    class Counting(beam.DoFn):
        def __dir__(self):  # get_dofn_specs walks dir(dofn): count the walks
            walks.append(1)
            return super().__dir__()

        def process(self, element, seen=beam.DoFn.StateParam(spec)):  # noqa: B008
            yield element

    fn, other = Counting(), beam.Map(str).fn
    states, timers = userstate.get_dofn_specs(fn)
    assert states == {spec} and timers == set()
    states.clear()  # callers get their own sets
    assert userstate.get_dofn_specs(fn) == ({spec}, set())
    assert userstate.is_stateful_dofn(fn) and not userstate.is_stateful_dofn(other)
    assert len(walks) == 1
    assert userstate.get_dofn_specs(Counting()) == ({spec}, set()) and len(walks) == 2


def test_stateful_dofns_still_run_with_memoized_specs():
    """A keyed stateful DoFn (what Beam's specs are for) on the DirectRunner, after install()."""
    import apache_beam as beam
    from apache_beam.coders import VarIntCoder
    from apache_beam.testing.util import assert_that, equal_to
    from apache_beam.transforms import userstate

    beam_compat.install()
    seen = userstate.BagStateSpec("seen", VarIntCoder())

    class RunningSum(beam.DoFn):
        def process(self, kv, state=beam.DoFn.StateParam(seen)):  # noqa: B008 - Beam's idiom
            state.add(kv[1])
            yield kv[0], sum(state.read())

    with beam.Pipeline() as p:
        out = p | beam.Create([("a", 1), ("a", 2), ("b", 5)]) | beam.ParDo(RunningSum())
        last = out | beam.CombinePerKey(max)
        assert_that(last, equal_to([("a", 3), ("b", 5)]))


def _count_calls(monkeypatch, owner, name: str) -> list:
    """Replace `owner.name` (for this test) by a wrapper that records each call's first argument
    and then calls the original; returns the record."""
    calls, original = [], getattr(owner, name)

    def counting(first, *args, **kwargs):
        calls.append(first)
        return original(first, *args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return calls


def test_option_views_are_built_once_and_share_the_values(monkeypatch):
    from apache_beam.options.pipeline_options import (
        DebugOptions,
        PipelineOptions,
        StandardOptions,
        TypeOptions,
    )

    beam_compat.install()
    beam_compat.memoize_option_views()  # idempotent: still one layer over Beam's method
    assert not hasattr(PipelineOptions.view_as.__wrapped__, "_imgrec_memoized")
    built = _count_calls(monkeypatch, StandardOptions, "__init__")
    options = PipelineOptions(["--runner", "DirectRunner", "--experiments", "a"])
    first = options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is first and len(built) == 1
    assert first.runner == "DirectRunner"
    first.streaming = True  # set through one view: seen by the object and later views
    assert options.view_as(StandardOptions).streaming is True
    assert options.get_all_options()["streaming"] is True
    options.view_as(DebugOptions).add_experiment("b")
    assert options.view_as(DebugOptions).experiments == ["a", "b"]
    assert options.view_as(TypeOptions).pipeline_type_check is True
    # Another options object gets its own views, parsed from its own flags.
    other = PipelineOptions(["--runner", "FnApiRunner"])
    assert other.view_as(StandardOptions).runner == "FnApiRunner"
    assert other.view_as(StandardOptions).streaming is False and len(built) == 2
    # A view of a view (Beam's runners do this) shares the first object's values.
    assert first.view_as(DebugOptions).experiments == ["a", "b"]


def test_function_arguments_are_inspected_once_per_function_and_stay_correct(monkeypatch):
    import inspect

    from apache_beam.transforms import core

    beam_compat.install()
    beam_compat.memoize_function_arguments()  # idempotent: still one layer over Beam's function
    assert not hasattr(core.get_function_args_defaults.__wrapped__, "_imgrec_memoized")

    class Fn:
        def process(self, element, side=3):
            return element

    def plain(a, b=1, *rest, c=2):
        return a

    seen = _count_calls(monkeypatch, inspect, "signature")
    one, two = Fn(), Fn()
    assert core.get_function_args_defaults(one.process) == (["element", "side"], [3])
    args, defaults = core.get_function_args_defaults(two.process)  # another instance
    assert (args, defaults) == (["element", "side"], [3]) and len(seen) == 1
    args.append("x")  # callers get their own lists
    assert core.get_function_args_defaults(one.process) == (["element", "side"], [3])
    # The unbound function keeps its self parameter, bound or not is its own entry.
    assert core.get_function_args_defaults(Fn.process) == (["self", "element", "side"], [3])
    assert core.get_function_args_defaults(plain) == (["a", "b"], [1]) and len(seen) == 3
    plain.__defaults__ = (5,)  # changed defaults are seen
    assert core.get_function_args_defaults(plain) == (["a", "b"], [5]) and len(seen) == 4
    # Other callables are inspected every time, as by Beam.
    assert core.get_function_args_defaults(str.strip)[0] == ["self", "chars"]
    n = len(seen)
    core.get_function_args_defaults(str.strip)
    assert len(seen) == n + 1
    # What Beam makes of a DoFn with it: the DoFn signature of a ParDo's process.
    import apache_beam as beam
    from apache_beam.runners.common import DoFnSignature

    class Keep(beam.DoFn):
        def process(self, element, timestamp=beam.DoFn.TimestampParam):  # noqa: B008
            yield element

    method = DoFnSignature(Keep()).process_method
    assert method.args == ["element", "timestamp"]
    assert method.defaults == [beam.DoFn.TimestampParam]


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, None),  # no proxy: nothing to keep off it
        ({"no_proxy": "corp.example"}, None),
        ({"https_proxy": "http://proxy:3128"}, "localhost,127.0.0.1"),
        (
            {"http_proxy": "http://p:1", "no_proxy": "corp.example"},
            "corp.example,localhost,127.0.0.1",
        ),
        ({"grpc_proxy": "http://p:1", "no_grpc_proxy": "a, b"}, "a,b,localhost,127.0.0.1"),
        ({"https_proxy": "http://p:1", "no_proxy": "127.0.0.1,localhost"}, "127.0.0.1,localhost"),
    ],
)
def test_loopback_is_kept_off_grpc_proxies(environ, expected):
    """gRPC reads no_grpc_proxy, else no_proxy: the hosts it already skipped stay skipped,
    localhost and 127.0.0.1 join them, and no_proxy (other libraries') is left as it was."""
    env = dict(environ)
    beam_compat.keep_loopback_off_proxies(env)
    assert env.get("no_grpc_proxy") == expected
    assert env.get("no_proxy") == environ.get("no_proxy")


def test_cached_state_weights_are_beams_and_follow_newly_imported_modules(tmp_path, monkeypatch):
    """weigh_cached_state_once_per_module_set: the same weights as Beam's objsize call, module
    globals still left out, also those of a module imported after the ids were kept."""
    import sys

    import numpy as np
    from apache_beam.runners.worker import statecache

    beam_compat.weigh_cached_state_once_per_module_set()
    ours = statecache.get_deep_size
    assert getattr(ours, "_imgrec_memoized", False)
    beams = ours.__wrapped__
    values = [
        {"a": [1, 2, 3], "b": "x" * 1000},
        np.zeros((64, 64, 3), np.uint8),
        [("key", b"v" * 100)] * 10,
        {"globals": vars(np)},  # a module's globals: left out by both
        None,
    ]
    for value in values:
        assert ours(value) == beams(value), repr(value)[:80]
    assert ours({"globals": vars(np)}) < 1000  # numpy's namespace is not counted
    # A module imported after the kept ids: its globals are left out too.
    (tmp_path / "imgrec_fresh_module.py").write_text("BIG = list(range(100000))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import imgrec_fresh_module

    try:
        value = {"globals": vars(imgrec_fresh_module)}
        assert ours(value) == beams(value) < 1000
    finally:
        sys.modules.pop("imgrec_fresh_module", None)
    beam_compat.weigh_cached_state_once_per_module_set()  # idempotent
    assert statecache.get_deep_size is ours


def test_pickles_are_uncompressed_only_inside_the_context_and_both_kinds_load():
    from apache_beam.internal import pickler

    value = {"dofn": [1, 2, 3], "text": "x" * 1000}
    outside = pickler.dumps(value)
    with beam_compat.pickles_kept_in_process():
        inside = pickler.dumps(value)
        assert pickler.loads(outside) == value  # made before, compressed: still loads
    after = pickler.dumps(value)
    assert base64.b64decode(outside)[:3] == base64.b64decode(after)[:3] == b"BZh"
    assert base64.b64decode(inside)[:1] == b"\x80" and len(inside) > len(outside)
    assert pickler.loads(inside) == pickler.loads(after) == value


def test_an_in_memory_run_pickles_uncompressed_and_leaves_compression_on(monkeypatch):
    import apache_beam as beam
    from apache_beam.internal import cloudpickle_pickler
    from apache_beam.options.pipeline_options import PipelineOptions

    compressed = []
    real = cloudpickle_pickler.dumps

    def dumps(o, *args, **kwargs):
        out = real(o, *args, **kwargs)
        compressed.append(base64.b64decode(out)[:3] == b"BZh")
        return out

    monkeypatch.setattr(cloudpickle_pickler, "dumps", dumps)
    options = PipelineOptions(["--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=beam_compat.DirectRunner(), options=options) as p:
        _ = (
            p
            | beam.Create([1, 2])
            | "Add" >> beam.Map(lambda x: x + 1)
            | "Double" >> beam.Map(lambda x: x * 2)
        )
    assert False in compressed  # the runner's pickles: uncompressed
    assert base64.b64decode(cloudpickle_pickler.dumps([1]))[:3] == b"BZh"  # and after the run


def test_the_yield_return_lint_reads_each_functions_source_once(monkeypatch):
    import inspect

    import apache_beam as beam
    from apache_beam.transforms import core

    beam_compat.memoize_yield_return_check()
    read = []
    real = inspect.getsourcelines
    monkeypatch.setattr(inspect, "getsourcelines", lambda f: read.append(f) or real(f))

    class Mixed(beam.DoFn):
        def process(self, x):
            if x:
                return [x]
            yield x

    class Clean(beam.DoFn):
        def process(self, x):
            yield x

    for _ in range(3):
        assert core._check_fn_use_yield_and_return(Mixed().process)  # noqa: SLF001
        assert not core._check_fn_use_yield_and_return(Clean().process)  # noqa: SLF001
    assert len(read) == 2


def test_pickled_functions_list_beams_submodules_and_follow_new_imports(tmp_path, monkeypatch):
    """index_imported_submodules: for 300 loaded functions, each with the packages it
    refers to and a few more, the same submodules in the same order as Beam's own search; and a
    submodule imported after the index was built is found."""
    import concurrent.futures  # noqa: F401 - a package with a loaded submodule
    import inspect
    import sys
    import xml.etree.ElementTree  # noqa: F401

    import apache_beam as beam
    import numpy as np
    from apache_beam.internal.cloudpickle import cloudpickle

    beam_compat.index_imported_submodules()
    ours = cloudpickle._find_imported_submodules  # noqa: SLF001
    assert getattr(ours, "_imgrec_memoized", False)
    beams = ours.__wrapped__
    packages = [sys.modules[n] for n in ("concurrent", "xml", "numpy", "apache_beam.transforms")]
    checked = 0
    for module in list(sys.modules.values()):
        for value in list(vars(module).values())[:40] if hasattr(module, "__dict__") else ():
            if not inspect.isfunction(value) or checked >= 300:
                continue
            names = cloudpickle._extract_code_globals(value.__code__)  # noqa: SLF001
            deps = [value.__globals__[k] for k in names if k in value.__globals__] + packages
            assert [m.__name__ for m in ours(value.__code__, deps)] == [
                m.__name__ for m in beams(value.__code__, deps)
            ], value
            checked += 1
    assert checked == 300

    def uses_submodules():
        return concurrent.futures.ThreadPoolExecutor, np.linalg.norm, beam.transforms.core

    want = {"concurrent.futures", "numpy.linalg", "apache_beam.transforms.core"}
    found = ours(uses_submodules.__code__, [concurrent, np, beam])
    assert want <= {m.__name__ for m in found}
    assert found == beams(uses_submodules.__code__, [concurrent, np, beam])
    # A package and submodule imported after the index: found too.
    package = tmp_path / "imgrec_fresh_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "part.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import imgrec_fresh_package.part

    def uses_fresh():
        return imgrec_fresh_package.part.VALUE

    try:
        found = ours(uses_fresh.__code__, [imgrec_fresh_package])
        assert [m.__name__ for m in found] == ["imgrec_fresh_package.part"]
        assert found == beams(uses_fresh.__code__, [imgrec_fresh_package])
    finally:
        sys.modules.pop("imgrec_fresh_package.part", None)
        sys.modules.pop("imgrec_fresh_package", None)
    beam_compat.index_imported_submodules()  # idempotent
    assert cloudpickle._find_imported_submodules is ours  # noqa: SLF001
