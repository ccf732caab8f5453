"""The default command on an S3 bucket (moto's server on 127.0.0.1), whole process, with and
without one of imgrec's fixes to Beam's S3 filesystem (both on by default):
  --fix shared_client: Beam's S3 filesystem builds a boto3 session and client per operation;
    imgrec shares one (core/beam_clients.share_s3_clients). The "off" runs make that a no-op.
  --fix one_request_reads: Beam's FileSystems.open sends a HEAD for an object's size before it
    GETs the bytes; imgrec reads a whole file in one GET (core/beam_clients.read_object). The
    "off" runs read through FileSystems.open (beam_clients.ONE_REQUEST_SCHEMES emptied).
  --fix both: the two together, against Beam's S3 filesystem as it ships.

    PYTHONPATH=. .venv/bin/python bench/s3_convert.py --num_images 100 --repeats 3 --fix FIX

Each run is `python -m pipeline convert --input s3://.../** --output s3://.../out` with default
options (analysis and report on) and the endpoint options, through the test suite's relay in front
of moto, which counts the requests. Prints wall clock, CPU (the command and the processes it
waited for) and the requests moto saw, HEADs among them. moto is a Python server on the same
2-core box: what a kept connection saves on a real bucket (a TLS handshake per file) does not
show here.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench._common import alternate, cli_with_compat_off, load_average, timed_run  # noqa: E402

_NO_ONE_REQUEST_READS = {"ONE_REQUEST_SCHEMES": "set()"}
_RUNS = {
    "shared_client": cli_with_compat_off("share_s3_clients"),
    "one_request_reads": cli_with_compat_off(settings=_NO_ONE_REQUEST_READS),
    "both": cli_with_compat_off("share_s3_clients", settings=_NO_ONE_REQUEST_READS),
}
_LABELS = {
    "shared_client": ("client per operation", "shared client"),
    "one_request_reads": ("HEAD + GET per read", "one request per read"),
    "both": ("Beam's S3 filesystem", "imgrec's"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_images", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fix", choices=sorted(_RUNS), default="both")
    args = parser.parse_args()
    run_source = _RUNS[args.fix]
    off_label, on_label = _LABELS[args.fix]

    from pipeline.demo import build_corpus
    from tests.servers import FAKE_AWS_KEY, S3_REGION, _s3_server, put_corpus

    # As the tests' cloud_env: fake keys, no metadata-server lookup, botocore's standard retries.
    os.environ.update(
        AWS_ACCESS_KEY_ID=FAKE_AWS_KEY, AWS_SECRET_ACCESS_KEY=FAKE_AWS_KEY,
        AWS_DEFAULT_REGION=S3_REGION, AWS_EC2_METADATA_DISABLED="true", AWS_RETRY_MODE="standard",
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, _s3_server(Path(tmp)) as store:
        bucket = store.new_bucket("bench")
        summary = build_corpus(str(Path(tmp) / "photos"), num_images=args.num_images, seed=7)
        files = len(put_corpus(store, bucket, Path(tmp) / "photos"))
        print(f"corpus: {files} files ({summary['images']} photos) in s3://{bucket}/photos")
        env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
        requests: dict[str, collections.Counter] = {}
        runs = {"off": 0, "on": 0}

        def run_one(mode: str) -> tuple[float, float]:
            runs[mode] += 1
            out = store.uri(bucket, f"out-{mode}-{runs[mode]}")
            store.relay.requests.clear()
            cmd = [sys.executable, "-c", run_source, mode, "convert",
                   "--input", store.uri(bucket, "photos/**"), "--output", out,
                   *store.beam_args]  # fmt: skip
            wall, cpu = timed_run(cmd, env, f"{mode} run")
            requests[mode] = collections.Counter(m for m, _ in store.relay.requests)
            return wall, cpu

        medians = alternate(("off", "on"), args.repeats, run_one)
    (off_wall, off_cpu), (on_wall, on_cpu) = medians["off"], medians["on"]

    def said(mode: str) -> str:
        seen = requests[mode]
        return f"{sum(seen.values())} requests ({seen['HEAD']} HEAD, {seen['GET']} GET)"

    print(
        f"default command, whole process, medians of {args.repeats}: {off_label} "
        f"{off_wall:.1f} s wall / {off_cpu:.1f} s CPU, {said('off')}; {on_label} "
        f"{on_wall:.1f} s / {on_cpu:.1f} s CPU, {said('on')}: {off_wall / on_wall:.2f}x wall, "
        f"{off_cpu / on_cpu:.2f}x CPU ({load_average()})"
    )


if __name__ == "__main__":
    main()
