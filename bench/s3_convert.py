"""The default command on an S3 bucket (moto's server on 127.0.0.1), whole process, wall clock:
with Beam's own S3 filesystem (a boto3 client built per operation) against imgrec's shared clients
(core/beam_clients.share_s3_clients, on by default).

    PYTHONPATH=. .venv/bin/python bench/s3_convert.py --num_images 100 --repeats 3

Each run is `python -m pipeline convert --input s3://.../** --output s3://.../out` with default
options (analysis and report on); the "per operation" runs first set
`beam_clients.share_s3_clients` to a no-op, which is what Beam does by itself.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench._common import cli_with_compat_off  # noqa: E402
from tests.servers import FAKE_AWS_KEY, S3_REGION, free_port  # noqa: E402

_RUN = cli_with_compat_off("share_s3_clients")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_images", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import boto3

    from pipeline.demo import build_corpus

    port = free_port()
    moto = subprocess.Popen(
        [os.path.join(os.path.dirname(sys.executable), "moto_server"), "-H", "127.0.0.1",
         "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    env = dict(
        os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2", AWS_ACCESS_KEY_ID=FAKE_AWS_KEY,
        AWS_SECRET_ACCESS_KEY=FAKE_AWS_KEY, AWS_DEFAULT_REGION=S3_REGION,
    )  # fmt: skip
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    endpoint = f"http://127.0.0.1:{port}"
    try:
        time.sleep(3)
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=S3_REGION)
        s3.create_bucket(Bucket="bench-imgrec")
        with tempfile.TemporaryDirectory() as tmp:
            summary = build_corpus(tmp, num_images=args.num_images, seed=7)
            files = 0
            for root, _, names in os.walk(tmp):
                for name in names:
                    key = "photos/" + os.path.relpath(os.path.join(root, name), tmp)
                    s3.upload_file(os.path.join(root, name), "bench-imgrec", key)
                    files += 1
        print(f"corpus: {files} files ({summary['images']} photos) in s3://bench-imgrec/photos")
        times: dict[str, list[float]] = {"off": [], "on": []}
        for i in range(args.repeats):
            for mode in ("off", "on"):
                cmd = [sys.executable, "-c", _RUN, mode, "convert",
                       "--input", "s3://bench-imgrec/photos/**",
                       "--output", f"s3://bench-imgrec/out-{mode}-{i}",
                       f"--s3_endpoint_url={endpoint}", f"--s3_region_name={S3_REGION}"]  # fmt: skip
                started = time.monotonic()
                proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
                elapsed = time.monotonic() - started
                if proc.returncode != 0:
                    sys.exit(f"{mode} run {i} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
                times[mode].append(elapsed)
                print(f"  run {i} {mode:>3}: {elapsed:6.1f} s wall")
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        print(f"default command, whole process, median of {args.repeats}: "
              f"client per operation {off:.1f} s, shared clients {on:.1f} s, "
              f"speed-up {off / on:.2f}x (load {os.getloadavg()[0]:.1f})")  # fmt: skip
    finally:
        moto.kill()


if __name__ == "__main__":
    main()
