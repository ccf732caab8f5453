"""The Beam patches of the launch wing (pipeline/launch/patches.py) and the private Beam pieces
imgrec uses give Beam's own answers, and each patch is skipped when its target changed."""

from __future__ import annotations

import base64
import io

import pytest

from core import tfrecord
from pipeline.launch import patches
from pipeline.launch.switches import Switches, read_switches
from pipeline.runners import dask_runner
from pipeline.runners import direct as direct_runner

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
        tfrecord.write_record(out, r)
    assert out.getvalue() == _tf_written(tmp_path)


def test_read_record_reads_tensorflow_records_then_none(tmp_path):
    f = io.BytesIO(_tf_written(tmp_path))
    assert [tfrecord.read_record(f) for _ in RECORDS] == RECORDS
    assert tfrecord.read_record(f) is None


@pytest.mark.parametrize("where", [3, 10, 12, 15])  # length, its crc, the data, its crc
def test_read_record_refuses_damage_with_value_error(tmp_path, where):
    data = bytearray(_tf_written(tmp_path)[16 : 16 + 17])  # the record b"x"
    data[where] ^= 0x01
    with pytest.raises(ValueError, match="Not a valid TFRecord"):
        tfrecord.read_record(io.BytesIO(bytes(data)))


def test_dofn_output_handler_routes_outputs_to_receivers():
    from apache_beam.runners.common import Receiver
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.windowed_value import WindowedValue

    got = []

    class Collect(Receiver):
        def receive(self, windowed_value):
            got.append(windowed_value.value)

    handler = dask_runner._dofn_output_handler(None, Collect(), {})
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
    view_class, options = type(side), side._view_options()  # as dask_runner.py rebuilds it
    assert view_class is beam.pvalue.AsList and isinstance(options, dict)
    values = [WindowedValue(v, 0, (GlobalWindow(),)) for v in (1, 2)]
    assert list(SideInputMap(view_class, options, values)[GlobalWindow()]) == [1, 2]


def test_pop_dask_bag_kwargs_takes_the_bag_arguments_out():
    pytest.importorskip("dask")
    options = {"npartitions": 4, "partition_size": 16, "address": "tcp://127.0.0.1:1"}
    assert dask_runner._pop_dask_bag_kwargs(options) == {"npartitions": 4, "partition_size": 16}
    assert options == {"address": "tcp://127.0.0.1:1"}


def test_dofn_specs_are_computed_once_per_dofn_and_stay_correct():
    import apache_beam as beam
    from apache_beam.coders import VarIntCoder
    from apache_beam.transforms import userstate

    patches.install(Switches())
    patches.memoize_dofn_specs()  # idempotent: still one layer over Beam's function
    assert not hasattr(userstate.get_dofn_specs.__wrapped__, "_imgrec_patch")
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

    patches.install(Switches())
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

    patches.install(Switches())
    patches.memoize_option_views()  # idempotent: still one layer over Beam's method
    assert not hasattr(PipelineOptions.view_as.__wrapped__, "_imgrec_patch")
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

    patches.install(Switches())
    patches.memoize_function_arguments()  # idempotent: still one layer over Beam's function
    assert not hasattr(core.get_function_args_defaults.__wrapped__, "_imgrec_patch")

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
    direct_runner.keep_loopback_off_proxies(env)
    assert env.get("no_grpc_proxy") == expected
    assert env.get("no_proxy") == environ.get("no_proxy")


def test_pickles_are_uncompressed_only_inside_the_context_and_both_kinds_load():
    from apache_beam.internal import cloudpickle_pickler, pickler

    real = cloudpickle_pickler.bz2
    value = {"dofn": [1, 2, 3], "text": "x" * 1000}
    outside = pickler.dumps(value)
    with patches.pickles_kept_in_process():
        inside = pickler.dumps(value)
        assert pickler.loads(outside) == value  # made before, compressed: still loads
        with patches.pickles_kept_in_process():  # nested runs: the shim stays until the last
            pass
        assert pickler.loads(inside) == value
    after = pickler.dumps(value)
    assert cloudpickle_pickler.bz2 is real  # Beam's own, as it was
    assert base64.b64decode(outside)[:3] == base64.b64decode(after)[:3] == b"BZh"
    assert base64.b64decode(inside)[:1] == b"\x80" and len(inside) > len(outside)
    assert pickler.loads(after) == value


def test_a_library_run_leaves_beams_pickler_as_it_found_it(tmp_path):
    """An in-process run (a library caller's `pipeline.cli.main`) puts Beam's own bz2 back when it
    returns, and IMGREC_PATCHES_OFF=pickles_kept_in_process runs it on plain Beam throughout."""
    from apache_beam.internal import cloudpickle_pickler
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.launch.plan import read_plan
    from pipeline.launch.services import LocalServices

    real = cloudpickle_pickler.bz2
    argv = ["convert", "--input", str(tmp_path / "*.jpg"), "--output", str(tmp_path / "o")]
    off = {"IMGREC_PATCHES_OFF": "pickles_kept_in_process"}
    for environ, shimmed in (({}, True), (off, False)):
        plan = read_plan(argv, switches=read_switches(environ))
        runner = LocalServices(plan.switches).runner(PipelineOptions(["--runner=DirectRunner"]))
        with runner._in_process():
            assert (cloudpickle_pickler.bz2 is not real) is shimmed
        assert cloudpickle_pickler.bz2 is real


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
    with beam.Pipeline(runner=direct_runner.DirectRunner(), options=options) as p:
        _ = (
            p
            | beam.Create([1, 2])
            | "Add" >> beam.Map(lambda x: x + 1)
            | "Double" >> beam.Map(lambda x: x * 2)
        )
    assert False in compressed  # the runner's pickles: uncompressed
    assert base64.b64decode(cloudpickle_pickler.dumps([1]))[:3] == b"BZh"  # and after the run


def _other_shape(real):
    """What a Beam upgrade might leave under a patched name: a function of another signature."""

    def changed(*args, **kwargs):
        return real(*args, **kwargs)

    return changed


_TARGETS = {
    "memoize_dofn_specs": ("apache_beam.transforms.userstate", None, "get_dofn_specs"),
    "memoize_option_views": (
        "apache_beam.options.pipeline_options",
        "PipelineOptions",
        "view_as",
    ),
    "memoize_function_arguments": (
        "apache_beam.transforms.core",
        None,
        "get_function_args_defaults",
    ),
    "share_gcs_clients": ("apache_beam.io.gcp.gcsfilesystem", "GCSFileSystem", "_gcsIO"),
}


@pytest.mark.parametrize("change", ["gone", "other_shape"])
@pytest.mark.parametrize("name", sorted(_TARGETS))
def test_a_patch_whose_target_changed_is_skipped_and_beam_left_as_it_is(name, change, monkeypatch):
    import importlib

    module_name, class_name, attribute = _TARGETS[name]
    module = importlib.import_module(module_name)
    owner = getattr(module, class_name) if class_name else module
    real = getattr(owner, attribute)
    real = getattr(real, "__wrapped__", real)  # the test process may have patched it already
    if change == "gone":
        monkeypatch.delattr(owner, attribute)
    else:
        monkeypatch.setattr(owner, attribute, _other_shape(real))
    before = getattr(owner, attribute, None)
    assert getattr(patches, name)() is False
    assert getattr(owner, attribute, None) is before


def test_the_s3_patch_is_skipped_when_beams_client_module_changed(monkeypatch):
    from apache_beam.io.aws.clients.s3 import boto3_client

    monkeypatch.setattr(boto3_client, "boto3", object())
    assert patches.share_s3_clients() is False
    monkeypatch.delattr(boto3_client, "boto3")
    assert patches.share_s3_clients() is False


def test_in_process_pickles_are_skipped_when_beams_pickler_changed(monkeypatch):
    import bz2
    import types

    from apache_beam.internal import cloudpickle_pickler, pickler

    changed = types.SimpleNamespace(
        compress=_other_shape(bz2.compress), decompress=_other_shape(bz2.decompress)
    )
    monkeypatch.setattr(cloudpickle_pickler, "bz2", changed)
    with patches.pickles_kept_in_process():  # runs unpatched: still bz2
        assert base64.b64decode(pickler.dumps([1, 2]))[:3] == b"BZh"
        assert pickler.loads(pickler.dumps([1, 2])) == [1, 2]
    assert cloudpickle_pickler.bz2 is changed


def test_patches_can_be_switched_off_by_name():
    switches = read_switches({"IMGREC_PATCHES_OFF": "memoize_dofn_specs, gc_freeze"})
    assert not switches.patch_on("memoize_dofn_specs") and not switches.patch_on("gc_freeze")
    assert switches.patch_on("memoize_option_views")
    assert "memoize_dofn_specs" not in patches.install(switches)
    assert patches.install(read_switches({"IMGREC_PATCHES_OFF": "all"})) == {}
