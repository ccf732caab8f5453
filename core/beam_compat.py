"""The private Apache Beam APIs imgrec uses, each wrapped here once; nowhere else imports them.

Beam has no public API for these jobs: its TFRecord support is the `WriteToTFRecord` /
`ReadFromTFRecord` PTransforms, not record framing on a file imgrec already holds open (the writer
streams one whole shard per DoFn call, through `GzipSink` when compressed; `verify` reads shards it
opened through FileSystems); the parser `PipelineOptions` builds for its own flags is private; and
pipeline/runners/dask_runner.py runs DoFns the way Beam's own runners do, with three private pieces of
theirs (the output router, a side input's view options, DaskOptions' bag arguments). And
Beam recomputes a DoFn's state and timer specs (a signature inspection of each of its ~30
methods) about seven times per DoFn while it builds, translates and runs a pipeline, so
`memoize_dofn_specs` remembers them per DoFn object; `PipelineOptions.view_as` parses every
flag again on each of its ~1,500 calls per conversion, so `memoize_option_views` keeps each view;
and Beam inspects the signature of a DoFn's methods ~15,000 times per conversion, so
`memoize_function_arguments` keeps the answer per function; and Beam's state cache weighs each
value it caches after listing every loaded module's globals again, so
`weigh_cached_state_once_per_module_set` keeps that list; and Beam's cloudpickle lists every
loaded module again for each package a pickled function uses, so `index_imported_submodules`
indexes them. `install()` applies all six, and
core/beam_clients.py's: Beam's S3 and GCS filesystems reuse one client per process.
And Beam 2.77's DirectRunner first tries Prism, a Go runner it downloads from GitHub at run time
(an offline machine falls back in ~0.1 s; behind a proxy that never answers, the job waits
forever; online, the job runs on a runner imgrec's options and tests do not address), so
`DirectRunner` here is its batch path alone: Beam's FnApiRunner, set up as DirectRunner sets it up.
tests/unit/test_beam_compat.py pins what imgrec relies on, so a Beam upgrade that changes one fails
there, by name, rather than as a corrupt shard, a confusing option error or a broken Dask run.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref

from apache_beam.io.tfrecordio import _TFRecordUtil
from apache_beam.options.pipeline_options import _BeamArgumentParser
from apache_beam.runners.runner import PipelineRunner

from core import beam_clients

__all__ = [
    "BeamArgumentParser",
    "DirectRunner",
    "dofn_output_handler",
    "index_imported_submodules",
    "install",
    "is_direct_runner",
    "keep_loopback_off_proxies",
    "keep_pickles_in_process",
    "memoize_dofn_specs",
    "memoize_function_arguments",
    "memoize_option_views",
    "memoize_yield_return_check",
    "pickles_kept_in_process",
    "pop_dask_bag_kwargs",
    "read_record",
    "side_input_view",
    "skip_type_inference",
    "weigh_cached_state_once_per_module_set",
    "write_record",
]

# TFRecord framing (length, masked crc32c of the length, data, masked crc32c of the data) with
# Beam's fast crc32c, bound once (the writer calls it per record, ~5 us with the crc):
# write_record(file, data: bytes) -> None appends one record to `file`;
# read_record(file) -> bytes | None is the next record's data, None at the end; it raises
# ValueError on a damaged length or data checksum.
write_record = _TFRecordUtil.write_record
read_record = _TFRecordUtil.read_record

# The argparse.ArgumentParser subclass PipelineOptions parses with: it adds
# add_value_provider_argument, which some of Beam's own option classes call in
# _add_argparse_args. The launcher parses every registered option class with a subclass of it.
BeamArgumentParser = _BeamArgumentParser


def dofn_output_handler(window_fn, main_receivers, tagged_receivers):
    """Beam's router of a DoFn's outputs to receivers (`apache_beam.runners.common._OutputHandler`),
    for a DoFn run outside a Beam worker: no output counter, no batched outputs."""
    from apache_beam.runners.common import _OutputHandler  # Dask runs only.

    return _OutputHandler(
        window_fn=window_fn,
        main_receivers=main_receivers,
        tagged_receivers=tagged_receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )


def side_input_view(side_input) -> tuple[type, dict]:
    """(view class, view options) of a side input (AsList, AsSingleton, ...): what
    `apache_beam.transforms.sideinputs.SideInputMap` rebuilds the view from."""
    return type(side_input), side_input._view_options()


def pop_dask_bag_kwargs(dask_options: dict) -> dict:
    """The dask.Bag arguments (npartitions, partition_size) among DaskOptions' values, removed
    from `dask_options` (what is left configures the dask.distributed Client)."""
    from apache_beam.runners.dask.dask_runner import DaskOptions  # Dask runs only.

    return DaskOptions._extract_bag_kwargs(dask_options)


class _PerObject:
    """Values kept per live object, by identity, dropped when the object is collected: what the
    three memoizers below remember (DoFns and options objects may be unhashable or compare equal
    when they are not the same). Thread-safe."""

    def __init__(self):
        self._items: dict[int, tuple[weakref.ref, object]] = {}
        self._lock = threading.Lock()

    def get(self, obj):
        """The value kept for `obj`, or None."""
        with self._lock:
            hit = self._items.get(id(obj))
        return hit[1] if hit is not None and hit[0]() is obj else None

    def put(self, obj, value) -> bool:
        """Keep `value` for `obj`; False (nothing kept) if `obj` cannot be weakly referenced."""
        key = id(obj)
        try:
            # The callback runs as `obj` is freed, before its id can be reused. It takes no
            # lock: a collection can run it inside this object's own locked section.
            ref = weakref.ref(obj, lambda _dead, key=key: self._items.pop(key, None))
        except TypeError:
            return False
        with self._lock:
            self._items[key] = (ref, value)
        return True


def _wrap(owner, name: str, wrapper) -> None:
    """Put `wrapper` in place of `owner.name` (marked, with the original as `__wrapped__`)."""
    original = getattr(owner, name)
    wrapper._imgrec_memoized = True
    wrapper.__wrapped__ = original
    wrapper.__doc__ = original.__doc__
    setattr(owner, name, wrapper)


def _wrapped(owner, name: str) -> bool:
    return getattr(getattr(owner, name), "_imgrec_memoized", False)


def memoize_dofn_specs() -> None:
    """Compute `apache_beam.transforms.userstate.get_dofn_specs(dofn)` once per DoFn object.

    Beam calls it (directly and through `is_stateful_dofn`) from ParDo's construction, its
    runner-API translation, the DirectRunner's overrides and every DoFnRunner; each call walks
    `dir(dofn)` and builds an `inspect.signature` of every method. The result depends only on the
    default values of the DoFn's methods, fixed once the DoFn is built, so it is kept per object
    (by identity, dropped with the object). A default conversion with analysis builds ~370
    ParDos: this takes ~0.6 s of CPU off every run (about a sixth of a small conversion).
    Callers get fresh sets, as from Beam. Idempotent.
    """
    from apache_beam.transforms import userstate

    if _wrapped(userstate, "get_dofn_specs"):
        return
    compute = userstate.get_dofn_specs
    specs = _PerObject()

    def get_dofn_specs(dofn):
        hit = specs.get(dofn)
        if hit is None:
            states, timers = compute(dofn)
            hit = (frozenset(states), frozenset(timers))
            if not specs.put(dofn, hit):  # a DoFn that cannot be weakly referenced
                return states, timers
        return set(hit[0]), set(hit[1])

    _wrap(userstate, "get_dofn_specs", get_dofn_specs)


def memoize_option_views() -> None:
    """Build each `PipelineOptions.view_as(cls)` view once per options object and class.

    Beam's `view_as` builds a new argparse parser for `cls` and parses every flag again on each
    call, and Beam calls it (`view_as(TypeOptions)` and the like) from every transform's apply,
    output type inference and type check: ~1,500 times for a default conversion, ~0.5 s of CPU.
    A view keeps no value of its own: values live in the `_all_options` dict it shares with the
    object it was made from (Beam assigns it after parsing), so the same view object serves
    every later call. A cached view is used only while it still shares that object's dict and
    flags. Idempotent.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    if _wrapped(PipelineOptions, "view_as"):
        return
    make_view = PipelineOptions.view_as
    views_of = _PerObject()  # options object -> {class: view}
    lock = threading.Lock()

    def view_as(self, cls):
        with lock:
            views = views_of.get(self)
            view = views.get(cls) if views is not None else None
        if (
            view is not None
            and view._all_options is self._all_options
            and view._flags is self._flags
        ):
            return view
        view = make_view(self, cls)
        with lock:
            views = views_of.get(self)
            if views is None:
                views = {}
                if not views_of.put(self, views):  # cannot be weakly referenced: not kept
                    return view
            views[cls] = view
        return view

    _wrap(PipelineOptions, "view_as", view_as)


def memoize_function_arguments() -> None:
    """Compute `apache_beam.transforms.core.get_function_args_defaults(f)` once per function.

    Beam asks for the argument names and defaults of every DoFn method (an `inspect.signature`
    each) whenever it makes a DoFn's signature, state specs or runner, and the DirectRunner
    unpickles fresh DoFn objects for every bundle: ~15,000 calls for a default conversion. The
    answer depends only on the function: its code, defaults, and what it wraps. So it is kept
    per plain function, or per function under a bound method (the bound object does not change
    the answer: Beam drops the first parameter either way), and used while the function still
    has the same code and defaults. Other callables (partials, builtins, callable objects) are
    computed every time. Callers get fresh lists, as from Beam. Idempotent.
    """
    import inspect

    from apache_beam.transforms import core

    if _wrapped(core, "get_function_args_defaults"):
        return
    compute = core.get_function_args_defaults
    answers = {True: _PerObject(), False: _PerObject()}  # bound method or not -> per function

    def get_function_args_defaults(f):
        bound = inspect.ismethod(f)
        func = f.__func__ if bound else f
        if not inspect.isfunction(func):
            return compute(f)
        stamp = (func.__code__, func.__defaults__, func.__kwdefaults__)
        hit = answers[bound].get(func)
        if hit is None or any(a is not b for a, b in zip(hit[0], stamp, strict=True)):
            args, defaults = compute(f)
            hit = (stamp, args, defaults)
            answers[bound].put(func, hit)
        return list(hit[1]), list(hit[2])

    _wrap(core, "get_function_args_defaults", get_function_args_defaults)


def memoize_yield_return_check() -> None:
    """Beam's lint of each ParDo's `process` for mixing `yield` and `return`, once per function.

    `ParDo.__init__` calls `core._check_fn_use_yield_and_return(fn.process)`, which reads and
    tokenizes the method's source (`inspect.getsourcelines`) to print a warning: 0.5 ms for the
    inspection DoFn's `process`, 2.6 ms for the writer's, 37 us for a Map's lambda, and again for
    every ParDo Beam rebuilds from the runner proto (12,611 calls in the integration tier, 5.4 s
    under cProfile). The answer depends only on the source, so it is kept per code object (by
    identity, dropped with it). Idempotent.
    """
    import inspect

    from apache_beam.transforms import core

    if _wrapped(core, "_check_fn_use_yield_and_return"):
        return
    compute = core._check_fn_use_yield_and_return  # noqa: SLF001 - the lint ParDo calls
    answers = _PerObject()

    def check(fn):
        func = fn.__func__ if inspect.ismethod(fn) else fn
        code = getattr(func, "__code__", None)
        if code is None:
            return compute(fn)
        hit = answers.get(code)
        if hit is None:
            hit = (compute(fn),)
            answers.put(code, hit)
        return hit[0]

    _wrap(core, "_check_fn_use_yield_and_return", check)


def weigh_cached_state_once_per_module_set() -> None:
    """Beam's state cache weighing, without re-listing every module's globals on each call.

    Beam's SDK worker caches side inputs and state in a `StateCache` that weighs each value with
    `statecache.get_deep_size`, objsize's deep size. objsize leaves shared module globals out by
    first collecting the id of every loaded module's `__dict__`, on every call: ~5,000 modules
    with TensorFlow loaded, ~3.5 ms per call, 41 calls and 0.14 s of CPU per analysed conversion
    of 45 files (6.7% of it, py-spy). The same ids are kept here and collected again only when
    the number of loaded modules changes; the traversal, its filter, referents and sizes are
    Beam's own, so the weights are the same (tests/unit/test_beam_compat.py). A weight is only an
    estimate for evicting entries past the cache's budget. Idempotent.
    """
    import sys

    from apache_beam.runners.worker import statecache
    from objsize.traverse import ObjSizeSettings, TraversalContext, _iter_modules_globals

    if _wrapped(statecache, "get_deep_size"):
        return
    settings = ObjSizeSettings(
        get_referents_func=statecache._get_referents_func,
        filter_func=statecache._filter_func,
        get_size_func=statecache._size_func,
        exclude_modules_globals=False,  # added below, from the kept ids
    )
    kept: dict = {"modules": -1, "ids": frozenset()}
    lock = threading.Lock()

    def module_globals_ids() -> frozenset:
        with lock:
            if kept["modules"] != len(sys.modules):
                # objsize's own list of what it leaves out (the globals of every loaded module)
                modules = len(sys.modules)
                kept["ids"] = frozenset(map(id, _iter_modules_globals()))
                kept["modules"] = modules
            return kept["ids"]

    def get_deep_size(*objs) -> int:
        context = TraversalContext(settings)
        context.exclude_set.update(module_globals_ids())
        return context.get_deep_size(*objs)

    _wrap(statecache, "get_deep_size", get_deep_size)


def index_imported_submodules() -> None:
    """cloudpickle's search for the loaded submodules a pickled function uses, from an index.

    Beam's cloudpickle (`apache_beam.internal.cloudpickle`) pickles a function with the loaded
    submodules it can reach through a package global (`tf.io` when it names `tf` and `io`):
    `_find_imported_submodules` lists all of `sys.modules` again for each package the function
    refers to, ~5,000 names with TensorFlow loaded: 711 calls and 0.08 s of CPU per analysed
    conversion of 45 files, in process (0.003 s with this; 0.9 % of the whole test suite's CPU
    by py-spy). Here the loaded names are indexed by (package, next name part), and the index
    is built again only when `sys.modules` changes (its size or its last entry). A function's
    submodules are looked up under the names its code uses, each checked as Beam checks it, in
    `sys.modules`' order, so the list is Beam's (tests/unit/test_beam_compat.py compares both
    on hundreds of functions). Idempotent.
    """
    import sys
    import types

    from apache_beam.internal.cloudpickle import cloudpickle

    if _wrapped(cloudpickle, "_find_imported_submodules"):
        return
    kept: dict = {"stamp": None, "index": {}}
    lock = threading.Lock()

    def loaded_by_package() -> dict[tuple[str, str], list[tuple[int, str]]]:
        modules = sys.modules
        stamp = (len(modules), next(reversed(modules), None))
        with lock:
            if kept["stamp"] != stamp:
                index: dict[tuple[str, str], list[tuple[int, str]]] = {}
                for position, name in enumerate(list(modules)):
                    if not isinstance(name, str):  # old pytest put None there
                        continue
                    parts = name.split(".")
                    for i in range(1, len(parts)):
                        key = (".".join(parts[:i]), parts[i])
                        index.setdefault(key, []).append((position, name))
                kept["index"], kept["stamp"] = index, stamp
            return kept["index"]

    def find_imported_submodules(code, top_level_dependencies):
        subimports = []
        used = frozenset(code.co_names)
        index = None
        for x in top_level_dependencies:
            if isinstance(x, types.ModuleType) and hasattr(x, "__package__") and x.__package__:
                index = index if index is not None else loaded_by_package()
                package = x.__name__
                skip = len(package) + 1
                for _, name in sorted(h for t in used for h in index.get((package, t), ())):
                    module = sys.modules.get(name)
                    if module is not None and not set(name[skip:].split(".")) - used:
                        subimports.append(module)
        return subimports

    _wrap(cloudpickle, "_find_imported_submodules", find_imported_submodules)


# The hosts Beam's local SDK workers reach the runner at (its gRPC control and data channels).
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1")


def keep_loopback_off_proxies(environ) -> None:
    """Have gRPC reach `localhost` directly even when an HTTP proxy is configured.

    gRPC sends every channel through `https_proxy` / `http_proxy` unless its host is listed in
    `no_grpc_proxy` (or, when that is unset, `no_proxy`). Beam's DirectRunner worker processes
    connect to the runner at localhost:PORT, so with a proxy set and localhost not excluded,
    `imgrec convert --workers 2` (and any default run of 20,000 files or more) waited forever
    while the workers asked the proxy to CONNECT to localhost. This sets `no_grpc_proxy` to the
    hosts gRPC already skips plus localhost and 127.0.0.1; other libraries' proxy settings
    (urllib, requests, boto3: `no_proxy`) are left as they are.

    Args:
        environ: the environment to fix (os.environ: the worker processes inherit it).
    """
    if not any(environ.get(name) for name in ("grpc_proxy", "https_proxy", "http_proxy")):
        return
    current = environ.get("no_grpc_proxy")
    if current is None:
        current = environ.get("no_proxy", "")
    hosts = [h.strip() for h in current.split(",") if h.strip()]
    missing = [h for h in _LOOPBACK_HOSTS if h not in hosts]
    if missing or "no_grpc_proxy" not in environ:
        environ["no_grpc_proxy"] = ",".join(hosts + missing)


# What --runner may say to mean Beam's DirectRunner (Beam matches names case-insensitively, with
# or without "Runner"; DirectRunner is an alias of SwitchingDirectRunner).
_DIRECT_RUNNER_NAMES = frozenset(
    {
        "direct",
        "directrunner",
        "switchingdirectrunner",
        "apache_beam.runners.direct.directrunner",
        "apache_beam.runners.direct.direct_runner.directrunner",
        "apache_beam.runners.direct.direct_runner.switchingdirectrunner",
    }
)


def is_direct_runner(runner) -> bool:
    """Whether a --runner value (None: Beam's default) names Beam's DirectRunner."""
    return runner is None or str(runner).lower() in _DIRECT_RUNNER_NAMES


class DirectRunner(PipelineRunner):
    """Beam's DirectRunner for a batch pipeline, without its attempt to run on Prism first.

    `apache_beam.runners.direct.direct_runner.SwitchingDirectRunner.run_pipeline` (Beam 2.77)
    first hands any pipeline Prism supports to PrismRunner, which downloads its binary from
    github.com (`urlopen` without a timeout), and only on an exception falls back to the
    FnApiRunner. This runs the FnApiRunner directly, made as that fallback makes it: the
    pipeline's options go to the SDK workers in the provision info (their --beam_plugins,
    --s3_* options), and direct_num_workers / direct_running_mode choose in-memory or worker
    processes. imgrec's pipeline is batch and uses none of what the FnApiRunner lacks (streaming
    reads, TestStream, real-time timers). Passed to `beam.Pipeline(runner=...)`, so the options
    still say DirectRunner (provenance, `scratch_root`).

    Args:
        worker_command: for worker processes (direct_running_mode multi_processing), the shell
            command that starts one in place of Beam's `python -m
            apache_beam.runners.worker.sdk_worker_main` (pipeline/runners/forked_workers.py);
            None for Beam's.
    """

    def __init__(self, worker_command: str | None = None):
        super().__init__()
        self._worker_command = worker_command

    def run_pipeline(self, pipeline, options):
        from apache_beam.options.pipeline_options import DirectOptions
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.runners.portability.portable_runner import JobServiceHandle
        from apache_beam.transforms import environments

        direct = options.view_as(DirectOptions)
        if direct.direct_running_mode != "in_memory":
            keep_loopback_off_proxies(os.environ)  # the SDK workers' gRPC channels
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        provision = fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
        )
        if not self._worker_command or direct.direct_running_mode != "multi_processing":
            in_memory = direct.direct_running_mode in ("in_memory", "multi_threading")
            with pickles_kept_in_process() if in_memory else contextlib.nullcontext():
                return fn_runner.FnApiRunner(provision_info=provision).run_pipeline(
                    pipeline, options
                )
        workers = environments.SubprocessSDKEnvironment.from_command_string(self._worker_command)
        runner = fn_runner.FnApiRunner(default_environment=workers, provision_info=provision)
        # FnApiRunner.run_pipeline replaces the default environment with its own worker command
        # for the modes it names: while it runs, the mode is one it does not name.
        direct.direct_running_mode = _OWN_WORKER_COMMAND
        try:
            return runner.run_pipeline(pipeline, options)
        finally:
            direct.direct_running_mode = "multi_processing"


class _Bz2InThisProcess:
    """What Beam's pickler sees as `bz2` (`cloudpickle_pickler.bz2`): bz2 itself, except that
    while `pickles_kept_in_process` is active it leaves what it pickles uncompressed.

    Beam pickles every DoFn, bz2 at level 9, when it turns a pipeline into its runner proto, and
    unpickles it again for every bundle. An in-memory DirectRunner sends none of it to another
    process: a cProfile of the integration tier (142 tests, one process) spent 3.6 s compressing
    and 1.5 s decompressing. Unpickling takes both forms: bz2's own (b"BZh", what other processes
    and every run outside the context still write) and an uncompressed pickle (protocol 2 and
    later start with b"\x80"), so a pickle made before or elsewhere still loads.
    """

    def __init__(self, real):
        self._real = real
        self.keep_uncompressed = 0

    def compress(self, data, compresslevel=9):
        if self.keep_uncompressed:
            return data
        return self._real.compress(data, compresslevel=compresslevel)

    def decompress(self, data):
        return self._real.decompress(data) if data[:3] == b"BZh" else data


def _bz2_in_this_process() -> _Bz2InThisProcess | None:
    """Beam's pickler's `bz2`, made a `_Bz2InThisProcess` once; None if Beam's pickler no longer
    compresses through a module-level `bz2`."""
    from apache_beam.internal import cloudpickle_pickler

    shim = getattr(cloudpickle_pickler, "bz2", None)
    if shim is not None and not isinstance(shim, _Bz2InThisProcess):
        shim = cloudpickle_pickler.bz2 = _Bz2InThisProcess(shim)
    return shim


@contextlib.contextmanager
def pickles_kept_in_process():
    """While active, Beam's pickler writes uncompressed pickles (`_Bz2InThisProcess`): for a run
    whose pickles never leave this process (the DirectRunner in memory)."""
    shim = _bz2_in_this_process()
    if shim is None:
        yield
        return
    shim.keep_uncompressed += 1
    try:
        yield
    finally:
        shim.keep_uncompressed -= 1


def keep_pickles_in_process() -> None:
    """From now on Beam's pickler writes uncompressed pickles: for a process none of whose
    pickles leaves it (the analysis process, pipeline/analysis_process.py)."""
    shim = _bz2_in_this_process()
    if shim is not None:
        shim.keep_uncompressed += 1


# The direct_running_mode DirectRunner gives FnApiRunner while it runs worker processes started
# by DirectRunner's worker_command (any value Beam's run_pipeline does not test for).
_OWN_WORKER_COMMAND = "imgrec_worker_command"


# Beam infers each PCollection's element type while a pipeline is built, by disassembling the
# bytecode of every Map/FlatMap/ParDo function and of the functions they call
# (`trivial_inference`): ~1 s of CPU per conversion of 40 photos in a warm process (5.3 s ->
# 4.3 s, medians of 3, one in-memory worker, analysis included: ~400 transforms applied, TFT's
# among them); the whole default command 1.09x faster and 1.12x less CPU at 1 and at 300 files
# (bench/ablations/type_inference.py, docs/benchmarks.md). imgrec declares no element types and
# checks none: its transforms say what they output in their docstrings and tests, and every
# PCollection's coder is then Beam's default (FastPrimitivesCoder, deterministic for the
# str/int/tuple keys imgrec groups by). IMGREC_BEAM_TYPE_INFERENCE=1 keeps Beam's inference (an
# A/B switch for benchmarks).
TYPE_INFERENCE_ENV = "IMGREC_BEAM_TYPE_INFERENCE"


def skip_type_inference(options) -> None:
    """Turn Beam's construction-time type inference off in `options` (unless TYPE_INFERENCE_ENV)."""
    from apache_beam.options.pipeline_options import TypeOptions

    if os.environ.get(TYPE_INFERENCE_ENV) != "1":
        options.view_as(TypeOptions).pipeline_type_check = False


def install() -> None:
    """The fixes above and core/beam_clients.py's: what every imgrec process (launcher and Beam
    workers) runs with."""
    beam_clients.share_s3_clients()
    beam_clients.share_gcs_clients()
    memoize_dofn_specs()
    memoize_option_views()
    memoize_function_arguments()
    memoize_yield_return_check()
    weigh_cached_state_once_per_module_set()
    index_imported_submodules()
