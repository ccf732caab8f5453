"""The local runner: Beam's DirectRunner for a batch pipeline, without its attempt to run on Prism.

Beam 2.77's `SwitchingDirectRunner` first hands a pipeline to PrismRunner, which downloads a Go
binary from GitHub at run time (behind a proxy that never answers, the job waits forever). This
runs Beam's FnApiRunner directly, set up as DirectRunner's own fallback sets it up.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from contextlib import AbstractContextManager

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineRunner
from apache_beam.transforms import environments

__all__ = ["DirectRunner", "keep_loopback_off_proxies"]

# The hosts Beam's local SDK workers reach the runner at (its gRPC control and data channels).
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1")
# The direct_running_mode given to FnApiRunner while it runs our own worker command (any value
# its run_pipeline does not test for, so it keeps the environment we set).
_OWN_WORKER_COMMAND = "imgrec_worker_command"


def keep_loopback_off_proxies(environ) -> None:
    """Have gRPC reach localhost directly even when an HTTP proxy is configured.

    gRPC sends every channel through `https_proxy` / `http_proxy` unless its host is listed in
    `no_grpc_proxy` (else `no_proxy`): DirectRunner's worker processes, which connect to the
    runner at localhost, then waited forever on the proxy. Other libraries' settings are kept.
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


class DirectRunner(PipelineRunner):
    """Beam's FnApiRunner as DirectRunner's fallback makes it: the options reach the SDK workers
    in the provision info; direct_num_workers and direct_running_mode choose in-memory or worker
    processes. Passed to `beam.Pipeline(runner=...)`, so the options still say DirectRunner.

    Args:
        worker_command: for worker processes, the shell command that starts one in place of
            Beam's `sdk_worker_main` (pipeline/launch/forked_workers.py); None for Beam's.
        in_process: entered around a run whose workers are threads of this process (the
            launch's `pickles_kept_in_process`); plain Beam without it.
    """

    def __init__(
        self,
        worker_command: str | None = None,
        in_process: Callable[[], AbstractContextManager] = contextlib.nullcontext,
    ):
        super().__init__()
        self._worker_command = worker_command
        self._in_process = in_process

    def run_pipeline(self, pipeline, options):
        direct = options.view_as(DirectOptions)
        if direct.direct_running_mode != "in_memory":
            keep_loopback_off_proxies(os.environ)  # the SDK workers' gRPC channels
        provision = _provision_info(options)
        if not self._worker_command or direct.direct_running_mode != "multi_processing":
            runner = fn_runner.FnApiRunner(provision_info=provision)
            if direct.direct_running_mode not in ("in_memory", "multi_threading"):
                return runner.run_pipeline(pipeline, options)
            with self._in_process():  # nothing pickled leaves this process
                return runner.run_pipeline(pipeline, options)
        return self._run_on_own_workers(pipeline, options, provision)

    def _run_on_own_workers(self, pipeline, options, provision):
        workers = environments.SubprocessSDKEnvironment.from_command_string(self._worker_command)
        runner = fn_runner.FnApiRunner(default_environment=workers, provision_info=provision)
        # FnApiRunner replaces the default environment with its own worker command for the
        # modes it names: while it runs, the mode is one it does not name.
        direct = options.view_as(DirectOptions)
        direct.direct_running_mode = _OWN_WORKER_COMMAND
        try:
            return runner.run_pipeline(pipeline, options)
        finally:
            direct.direct_running_mode = "multi_processing"


def _provision_info(options):
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
