"""The default command on a GCS bucket (gcp-storage-emulator on 127.0.0.1), whole process, with
and without one of imgrec's fixes to Beam's GCS filesystem (both on by default):
  --fix shared_client: Beam's GCS filesystem builds a google-cloud-storage client per operation;
    imgrec shares one (core/beam_clients.share_gcs_clients). The "off" runs make that a no-op.
  --fix one_request_reads: Beam's FileSystems.open asks for an object's metadata before its
    bytes; imgrec reads a whole file in one GET (core/beam_clients.read_object). The "off" runs
    read through FileSystems.open (beam_clients.ONE_REQUEST_SCHEMES emptied).
  --fix both: the two together, against Beam's GCS filesystem as it ships.

    PYTHONPATH=. .venv/bin/python bench/gcs_convert.py --num_images 100 --repeats 3 --fix FIX

Each run is `python -m pipeline convert --input gs://.../** --output gs://.../out` with default
options (analysis and report on), through the test suite's relay in front of the emulator, which
counts the requests. Prints wall clock, CPU (the command and the processes it
waited for) and the requests the emulator saw, bucket-metadata lookups among them. The emulator is
a Python server on the same 2-core box, and closes each connection after answering: what a kept
connection saves on a real bucket (a TLS handshake per file) does not show here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench._common import alternate, cli_with_compat_off, load_average, timed_run  # noqa: E402

_NO_ONE_REQUEST_READS = {"ONE_REQUEST_SCHEMES": "set()"}
_RUNS = {
    "shared_client": cli_with_compat_off("share_gcs_clients"),
    "one_request_reads": cli_with_compat_off(settings=_NO_ONE_REQUEST_READS),
    "both": cli_with_compat_off("share_gcs_clients", settings=_NO_ONE_REQUEST_READS),
}
_LABELS = {
    "shared_client": ("client per operation", "shared client"),
    "one_request_reads": ("metadata + bytes per read", "one request per read"),
    "both": ("Beam's GCS filesystem", "imgrec's"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_images", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fix", choices=sorted(_RUNS), default="shared_client")
    args = parser.parse_args()
    run_source = _RUNS[args.fix]
    off_label, on_label = _LABELS[args.fix]

    from pipeline.demo import build_corpus
    from tests.servers import _FAKE_ADC, TEST_PROJECT, _gcs_server, put_corpus

    with tempfile.TemporaryDirectory() as tmp:
        adc = Path(tmp) / "adc.json"
        adc.write_text(json.dumps(_FAKE_ADC))
        os.environ.update(
            GOOGLE_APPLICATION_CREDENTIALS=str(adc), GOOGLE_CLOUD_PROJECT=TEST_PROJECT
        )
        (Path(tmp) / "gcs").mkdir()
        with _gcs_server(Path(tmp) / "gcs") as store:
            bucket = store.new_bucket("bench")
            summary = build_corpus(str(Path(tmp) / "photos"), num_images=args.num_images, seed=7)
            files = len(put_corpus(store, bucket, Path(tmp) / "photos"))
            print(f"corpus: {files} files ({summary['images']} photos) in gs://{bucket}/photos")
            env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
            requests: dict[str, list[tuple[int, int]]] = {"off": [], "on": []}
            runs = {"off": 0, "on": 0}

            def run_one(mode: str) -> tuple[float, float]:
                runs[mode] += 1
                out = store.uri(bucket, f"out-{mode}-{runs[mode]}")
                store.relay.requests.clear()
                cmd = [sys.executable, "-c", run_source, mode, "convert",
                       "--input", store.uri(bucket, "photos/**"), "--output", out]  # fmt: skip
                wall, cpu = timed_run(cmd, env, f"{mode} run")
                seen = list(store.relay.requests)
                lookups = sum(
                    m == "GET" and t.startswith(f"/storage/v1/b/{bucket}?") for m, t in seen
                )
                requests[mode].append((len(seen), lookups))
                return wall, cpu

            medians = alternate(("off", "on"), args.repeats, run_one)
    (off_wall, off_cpu), (on_wall, on_cpu) = medians["off"], medians["on"]
    print(
        f"default command, whole process, medians of {args.repeats}: {off_label} "
        f"{off_wall:.1f} s wall / {off_cpu:.1f} s CPU, {requests['off'][-1][0]} requests "
        f"({requests['off'][-1][1]} bucket lookups); {on_label} {on_wall:.1f} s / "
        f"{on_cpu:.1f} s CPU, {requests['on'][-1][0]} requests ({requests['on'][-1][1]} bucket "
        f"lookups): {off_wall / on_wall:.2f}x wall, {off_cpu / on_cpu:.2f}x CPU "
        f"({load_average()})"
    )


if __name__ == "__main__":
    main()
