"""The A/B loop of bench/gcs_convert.py and bench/s3_convert.py (their docstrings say what each
--fix turns off): the default command on a bucket of a local test server (tests/servers.py,
behind its relay, which counts the requests), whole process, with the fix off and on."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from bench._common import (
    REPO,
    alternate,
    imgrec_argv,
    load_average,
    timed_run,
    with_patches_off,
)

_NO_ONE_REQUEST_READS = {"ONE_REQUEST_SCHEMES": "set()"}


def main(
    doc: str,
    *,
    share_fix: str,
    filesystem: str,
    metadata_read: str,
    default_fix: str,
    server: Callable[[Path], AbstractContextManager],
    describe: Callable[[list[tuple[str, str]], str], str],
) -> None:
    """Parse --num_images, --repeats, --fix; put a demo corpus in a bucket of `server(folder)`;
    run `imgrec convert --input BUCKET/photos/** --output BUCKET/out-...` (and the store's Beam
    options) with the fix off and on, alternating; print the medians, the ratios and
    `describe(requests of the last run, bucket)` for each mode.

    Args:
        share_fix: the patch (pipeline/launch/patches.py) that shares this scheme's clients.
        filesystem: what the "both off" runs are called ("Beam's GCS filesystem").
        metadata_read: what a read is without one_request_reads ("HEAD + GET per read").
    """
    # Per --fix, what the "off" runs switch off: patches by name, core.beam_clients settings.
    fixes = {
        "shared_client": ((share_fix,), None),
        "one_request_reads": ((), _NO_ONE_REQUEST_READS),
        "both": ((share_fix,), _NO_ONE_REQUEST_READS),
    }
    labels = {
        "shared_client": ("client per operation", "shared client"),
        "one_request_reads": (metadata_read, "one request per read"),
        "both": (filesystem, "imgrec's"),
    }
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--num_images", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fix", choices=sorted(fixes), default=default_fix)
    args = parser.parse_args()
    patches_off, settings = fixes[args.fix]
    off_label, on_label = labels[args.fix]

    from pipeline.demo import build_corpus
    from tests.servers import put_corpus

    with tempfile.TemporaryDirectory() as tmp, server(Path(tmp)) as store:
        bucket = store.new_bucket("bench")
        summary = build_corpus(str(Path(tmp) / "photos"), num_images=args.num_images, seed=7)
        files = len(put_corpus(store, bucket, Path(tmp) / "photos"))
        print(
            f"corpus: {files} files ({summary['images']} photos) in {store.uri(bucket, 'photos')}"
        )
        env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
        requests: dict[str, str] = {}
        runs = {"off": 0, "on": 0}

        def run_one(mode: str) -> tuple[float, float]:
            runs[mode] += 1
            out = store.uri(bucket, f"out-{mode}-{runs[mode]}")
            store.relay.requests.clear()
            off = mode == "off"
            cmd = [*imgrec_argv(settings if off else None), "convert",
                   "--input", store.uri(bucket, "photos/**"), "--output", out,
                   *store.beam_args]  # fmt: skip
            run_env = with_patches_off(env, *(patches_off if off else ()))
            wall, cpu = timed_run(cmd, run_env, f"{mode} run")
            requests[mode] = describe(list(store.relay.requests), bucket)
            return wall, cpu

        medians = alternate(("off", "on"), args.repeats, run_one)
    (off_wall, off_cpu), (on_wall, on_cpu) = medians["off"], medians["on"]
    print(
        f"default command, whole process, medians of {args.repeats}: {off_label} "
        f"{off_wall:.1f} s wall / {off_cpu:.1f} s CPU, {requests['off']}; {on_label} "
        f"{on_wall:.1f} s / {on_cpu:.1f} s CPU, {requests['on']}: {off_wall / on_wall:.2f}x wall, "
        f"{off_cpu / on_cpu:.2f}x CPU ({load_average()})"
    )
