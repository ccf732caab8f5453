"""The patches of Apache Beam's private internals that imgrec's own processes run with.

Each one pays for itself on the default command (docs/DESIGN.md, "Start-up and patches", has its
gain and the upstream change that would retire it) and each is guarded: if its target is missing
or has another shape (a Beam upgrade), the patch is skipped with one debug line and the process
runs on plain Beam. Nothing here runs on import: `install()` is called by the launch only.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import threading
import types
import weakref
from collections.abc import Callable

from pipeline.launch.switches import Switches

__all__ = [
    "in_process_pickles",
    "install",
    "memoize_dofn_specs",
    "memoize_function_arguments",
    "memoize_option_views",
    "pickles_kept_in_process",
    "share_gcs_clients",
    "share_s3_clients",
    "skipped",
]

_LOG = logging.getLogger(__name__)
_MARK = "_imgrec_patch"
# Connections a shared store client keeps open (the libraries' default is 10): reads in flight
# plus one worker's shard writers and renames, without "connection pool is full" churn.
_MAX_POOL_CONNECTIONS = 32


def skipped(patch: str, why: str) -> bool:
    """Say (one debug line) that `patch` was not applied, and why; returns False."""
    _LOG.debug("imgrec: patch %s skipped: %s; running unpatched", patch, why)
    return False


def _replace(owner, name: str, params: list[str], wrap: Callable, patch: str) -> bool:
    """Put `wrap(original)` in place of `owner.name` if it is there with parameters `params`."""
    original = getattr(owner, name, None)
    if original is None or not callable(original):
        return skipped(patch, f"{owner.__name__}.{name} is gone")
    if getattr(original, _MARK, False):
        return True
    shape = _params(original)
    if shape != params:
        return skipped(patch, f"{owner.__name__}.{name} takes {shape}, not {params}")
    wrapper = wrap(original)
    setattr(wrapper, _MARK, True)
    wrapper.__wrapped__ = original
    setattr(owner, name, wrapper)
    return True


class _PerObject:
    """Values kept per live object, by identity, dropped when it is collected (DoFns and options
    objects may be unhashable, or equal when they are not the same). Thread-safe."""

    def __init__(self):
        self._items: dict[int, tuple[weakref.ref, object]] = {}
        self._lock = threading.Lock()

    def get(self, obj):
        with self._lock:
            hit = self._items.get(id(obj))
        return hit[1] if hit is not None and hit[0]() is obj else None

    def put(self, obj, value) -> bool:
        """Keep `value` for `obj`; False if `obj` cannot be weakly referenced."""
        key = id(obj)
        try:  # the callback runs before the id can be reused; it takes no lock (gc may run it)
            ref = weakref.ref(obj, lambda _dead, key=key: self._items.pop(key, None))
        except TypeError:
            return False
        with self._lock:
            self._items[key] = (ref, value)
        return True


def memoize_dofn_specs() -> bool:
    """`userstate.get_dofn_specs(dofn)` once per DoFn object.

    Beam recomputes a DoFn's state and timer specs (a signature of each of its methods) from
    ParDo's construction, its translation and every DoFnRunner; they depend only on the DoFn.
    """
    from apache_beam.transforms import userstate

    def wrap(compute):
        specs = _PerObject()

        def get_dofn_specs(dofn):
            hit = specs.get(dofn)
            if hit is None:
                states, timers = compute(dofn)
                hit = (frozenset(states), frozenset(timers))
                if not specs.put(dofn, hit):
                    return states, timers
            return set(hit[0]), set(hit[1])

        return get_dofn_specs

    return _replace(userstate, "get_dofn_specs", ["dofn"], wrap, "memoize_dofn_specs")


def memoize_option_views() -> bool:
    """`PipelineOptions.view_as(cls)` built once per options object and class.

    Beam's `view_as` builds a parser and parses every flag again on each call, and calls it from
    every transform's apply. A view keeps no value of its own (it shares the object's
    `_all_options`), so a kept view serves while it still shares that dict and those flags.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    def wrap(make_view):
        views_of = _PerObject()
        lock = threading.Lock()

        def view_as(self, cls):
            with lock:
                views = views_of.get(self)
                view = views.get(cls) if views is not None else None
            if view is not None and view._all_options is self._all_options:
                if view._flags is self._flags:
                    return view
            view = make_view(self, cls)
            with lock:
                views = views_of.get(self)
                if views is None:
                    views = {}
                    if not views_of.put(self, views):
                        return view
                views[cls] = view
            return view

        return view_as

    return _replace(PipelineOptions, "view_as", ["self", "cls"], wrap, "memoize_option_views")


def memoize_function_arguments() -> bool:
    """`core.get_function_args_defaults(f)` once per function (and its code and defaults).

    Beam asks for the argument names of every DoFn method whenever it makes a DoFn's signature
    or runner, and the DirectRunner unpickles fresh DoFns for every bundle. The answer depends
    only on the function, not on the object a method is bound to.
    """
    from apache_beam.transforms import core

    def wrap(compute):
        answers = {True: _PerObject(), False: _PerObject()}  # bound method or not

        def get_function_args_defaults(f):
            bound = inspect.ismethod(f)
            func = f.__func__ if bound else f
            if not inspect.isfunction(func):
                return compute(f)
            stamp = (func.__code__, func.__defaults__, func.__kwdefaults__)
            hit = answers[bound].get(func)
            if hit is None or any(a is not b for a, b in zip(hit[0], stamp, strict=True)):
                hit = (stamp, *compute(f))
                answers[bound].put(func, hit)
            return list(hit[1]), list(hit[2])

        return get_function_args_defaults

    return _replace(core, "get_function_args_defaults", ["f"], wrap, "memoize_function_arguments")


class _SharedS3Session:
    """Stands in for `boto3.session.Session()` in Beam's S3 client: one boto3 client per process
    and set of arguments (clients are thread-safe; the pid keeps a fork off its parent's)."""

    _lock = threading.Lock()
    _clients: dict[tuple, object] = {}

    def __init__(self, boto3_module):
        self._boto3 = boto3_module

    def client(self, *args, **kwargs):
        key = (os.getpid(), args, tuple(sorted(kwargs.items())))
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                if "config" not in kwargs:
                    from botocore.config import Config

                    kwargs["config"] = Config(max_pool_connections=_MAX_POOL_CONNECTIONS)
                client = self._boto3.session.Session().client(*args, **kwargs)
                self._clients[key] = client
            return client


class _SharedBoto3:
    """`boto3` as Beam's S3 client wrapper sees it: the real module, sessions shared."""

    def __init__(self, boto3_module):
        self.real = boto3_module
        self.session = types.SimpleNamespace(Session=lambda: _SharedS3Session(boto3_module))

    def __getattr__(self, name):
        return getattr(self.real, name)


def share_s3_clients() -> bool:
    """Beam's S3 filesystem reuses boto3 clients instead of building one per operation.

    `S3FileSystem` makes a new `S3IO`, and with it a boto3 session and client (a fresh
    connection pool and credential walk), for every open, exists, size, rename and match.
    """
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return skipped("share_s3_clients", "Beam's AWS extra is not installed")
    real = getattr(boto3_client, "boto3", None)
    if isinstance(real, _SharedBoto3):
        return True
    if not hasattr(getattr(real, "session", None), "Session"):
        return skipped("share_s3_clients", "boto3_client.boto3 is not boto3")
    boto3_client.boto3 = _SharedBoto3(real)
    return True


_gcs_lock = threading.Lock()
_gcs_clients: dict[tuple, object] = {}


def _gcs_client(options):
    """One google-cloud-storage client per process and per what Beam builds one from."""
    from apache_beam.io.gcp import gcsio
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

    if options is None:
        options = PipelineOptions()
    elif isinstance(options, dict):
        options = PipelineOptions.from_dictionary(options)
    cloud = options.view_as(GoogleCloudOptions)
    key = (
        os.getpid(),
        cloud.project,
        cloud.job_name,
        repr(cloud.gcs_custom_audit_entries),
        os.environ.get("STORAGE_EMULATOR_HOST"),
        os.environ.get("GOOGLE_CLOUD_PROJECT"),
    )
    with _gcs_lock:
        client = _gcs_clients.get(key)
        if client is None:
            import requests

            client = gcsio.create_storage_client(options)
            adapter = requests.adapters.HTTPAdapter(
                pool_connections=_MAX_POOL_CONNECTIONS, pool_maxsize=_MAX_POOL_CONNECTIONS
            )
            for prefix in ("https://", "http://"):
                client._http.mount(prefix, adapter)
            _gcs_clients[key] = client
    return client, options


def share_gcs_clients() -> bool:
    """Beam's GCS filesystem reuses one storage client (its connections, its bucket metadata)
    instead of building one per operation; each call still gets its own `GcsIO`."""
    try:
        from apache_beam.io.gcp import gcsfilesystem, gcsio
    except ImportError:
        return skipped("share_gcs_clients", "Beam's GCP extra is not installed")
    if not callable(getattr(gcsio, "create_storage_client", None)):
        return skipped("share_gcs_clients", "gcsio.create_storage_client is gone")

    def wrap(_original):
        def _gcsIO(self):  # noqa: N802 - Beam's name
            client, options = _gcs_client(self._pipeline_options)
            return gcsio.GcsIO(storage_client=client, pipeline_options=options)

        return _gcsIO

    owner = gcsfilesystem.GCSFileSystem
    return _replace(owner, "_gcsIO", ["self"], wrap, "share_gcs_clients")


class _Bz2InThisProcess:
    """Beam's pickler's `bz2` while pickles stay in this process: they are left uncompressed.

    Beam pickles every DoFn with bz2 at level 9 and unpickles it for every bundle; a pickle that
    never leaves the process needs no compression. Both forms still load.
    """

    def __init__(self, real):
        self._real = real

    def compress(self, data, compresslevel=9):
        return data

    def decompress(self, data):
        return self._real.decompress(data) if data[:3] == b"BZh" else data


_bz2_lock = threading.Lock()
_bz2_users = 0  # runs inside pickles_kept_in_process; the shim is in place while there are any


def _put_bz2_shim() -> bool:
    """Put the shim in place of Beam's pickler's `bz2`; False where that `bz2` has changed."""
    from apache_beam.internal import cloudpickle_pickler

    real = getattr(cloudpickle_pickler, "bz2", None)
    if isinstance(real, _Bz2InThisProcess):
        return True
    if _params(getattr(real, "compress", None)) != ["data", "compresslevel"]:
        return skipped("pickles_kept_in_process", "Beam's pickler no longer compresses with bz2")
    cloudpickle_pickler.bz2 = _Bz2InThisProcess(real)
    return True


def _take_bz2_shim() -> None:
    """Give Beam's pickler its own `bz2` back."""
    from apache_beam.internal import cloudpickle_pickler

    shim = getattr(cloudpickle_pickler, "bz2", None)
    if isinstance(shim, _Bz2InThisProcess):
        cloudpickle_pickler.bz2 = shim._real


def _params(function) -> list[str] | None:
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None


@contextlib.contextmanager
def pickles_kept_in_process():
    """While active, Beam's pickler writes uncompressed pickles: for a run whose pickles never
    leave this process (the DirectRunner in memory, the analysis process). Beam's own `bz2` is
    back once the last such run has returned."""
    global _bz2_users
    with _bz2_lock:
        if _bz2_users == 0 and not _put_bz2_shim():
            placed = False
        else:
            _bz2_users += 1
            placed = True
    try:
        yield
    finally:
        if placed:
            with _bz2_lock:
                _bz2_users -= 1
                if _bz2_users == 0:
                    _take_bz2_shim()


def in_process_pickles(switches: Switches) -> Callable[[], contextlib.AbstractContextManager]:
    """The context an in-memory run runs in: `pickles_kept_in_process`, unless switched off."""
    if switches.patch_on("pickles_kept_in_process"):
        return pickles_kept_in_process
    return contextlib.nullcontext


# Applied by `install()`, in this order.
PATCHES = (
    share_s3_clients,
    share_gcs_clients,
    memoize_dofn_specs,
    memoize_option_views,
    memoize_function_arguments,
)


def install(switches: Switches) -> dict[str, bool]:
    """Apply every patch `switches` leaves on (each idempotent); returns which took."""
    return {p.__name__: p() for p in PATCHES if switches.patch_on(p.__name__)}
