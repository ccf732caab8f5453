"""Reader on s3:// (moto on 127.0.0.1) vs local: time to first batch, steady read rate, downloads.

    python bench/read_s3.py                       # ~2,000 images (docs/reader.md numbers)
    python bench/read_s3.py --num_images 300      # smoke

Converts the real-photo bench corpus once (bench/_work/, 16 shards), uploads it to a moto S3
server started here, then in this one process:
  downloads      every 'train' shard through the shard cache into an empty cache_dir, with
                 boto3 (the reader's s3:// client) and with Apache Beam's FileSystems: MB/s
  local          make_dataset(local dir): seconds from the call to the first batch, then
                 images/s over the rest of one evaluation epoch
  s3 cold        the same on s3:// with an empty cache_dir (shards download as read)
  s3 warm        the same on s3:// with the cache the cold run filled (no shard downloads)
Batch 64, 224x224, evaluation order; `--repeats` rounds, medians reported. moto is a Python
server on the same 2-core box as the reader, so s3 numbers are a floor for a real S3 bucket's
first batch only in CPU terms, not in network latency.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import corpus, load_average, median, print_table  # noqa: E402
from bench.read import _converted  # noqa: E402


def _moto(root: str):
    from tests.servers import HOST, ServerProcess, _venv_bin, free_port

    port = free_port()
    server = ServerProcess(
        "moto_server",
        [_venv_bin("moto_server"), "-H", HOST, "-p", str(port)],
        port,
        "/",
        __import__("pathlib").Path(root) / "moto.log",
    )
    server.start()
    return server


def _epoch(data_dir: str, **kw) -> tuple[float, float, int]:
    """(seconds to the first batch, images/s after it, images) for one evaluation epoch."""
    from pipeline.reader import dataset as reader

    t0 = time.perf_counter()
    ds = reader.make_dataset(data_dir, "train", 64, image_size=(224, 224), **kw)
    it = iter(ds)
    images, _ = next(it)
    t1 = time.perf_counter()
    n_rest = 0
    for images, _ in it:
        n_rest += int(images.shape[0])
    t2 = time.perf_counter()
    return t1 - t0, n_rest / max(1e-9, t2 - t1), n_rest + 64


def _download_rate(store, data_dir: str, split_info: dict) -> float:
    """MB/s copying every shard of the split into an empty cache (8 in parallel)."""
    from core import shard_cache

    cache_dir = tempfile.mkdtemp(prefix="imgrec-bench-dl-")
    try:
        cache = shard_cache.ShardCache(store, data_dir, "train", split_info["shards"], cache_dir)
        uris = [f"{data_dir}/{s['file']}" for s in split_info["shards"]]
        t0 = time.perf_counter()
        futures = [cache.start(u) for u in uris]
        for f in futures:
            f.result()
        dt = time.perf_counter() - t0
        assert cache.downloads == len(uris)
        return split_info["num_bytes"] / 1e6 / dt
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_images", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

    src, _ = corpus(args.num_images)  # the bench corpus (bench/read.py); rejects dropped
    local = _converted(
        src, args.num_images, ["--min_shards", "16", "--splits", "train=1.0"], "s3bench"
    )
    import boto3

    from core import schema, shard_cache

    root = tempfile.mkdtemp(prefix="imgrec-bench-s3-")
    server = _moto(root)
    try:
        client = boto3.client("s3", endpoint_url=server.url)
        client.create_bucket(Bucket="bench")
        for folder, _, files in os.walk(local):
            for name in files:
                path = os.path.join(folder, name)
                key = "ds/" + os.path.relpath(path, local).replace(os.sep, "/")
                client.upload_file(path, "bench", key)
        s3_dir = "s3://bench/ds"
        info = schema.load_dataset_info(local)
        split = info["splits"]["train"]
        print(
            f"[bench] {split['num_examples']} images, {len(split['shards'])} shards, "
            f"{split['num_bytes'] / 1e6:.1f} MB; {load_average()}",
            file=sys.stderr,
        )

        rates: dict[str, list[float]] = {"boto3": [], "beam": []}
        stores = {
            "boto3": shard_cache.open_store(s3_dir, server.url),
            "beam": shard_cache.open_store(s3_dir, server.url, beam=True),
        }
        for _ in range(args.repeats):
            for name, store in stores.items():
                rates[name].append(_download_rate(store, s3_dir, split))

        rows: dict[str, list[tuple[float, float, int]]] = {
            "local": [],
            "s3 cold": [],
            "s3 warm": [],
        }
        _epoch(local)  # warm-up: graph tracing, thread pools
        for _ in range(args.repeats):
            cache_dir = tempfile.mkdtemp(prefix="imgrec-bench-cache-")
            try:
                rows["local"].append(_epoch(local))
                s3_kw = {"cache_dir": cache_dir, "s3_endpoint_url": server.url}
                rows["s3 cold"].append(_epoch(s3_dir, **s3_kw))
                rows["s3 warm"].append(_epoch(s3_dir, **s3_kw))
            finally:
                shutil.rmtree(cache_dir, ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)

    print_table(
        f"shard download, {len(split['shards'])} shards, {split['num_bytes'] / 1e6:.1f} MB, "
        f"8 parallel, median of {args.repeats} ({load_average()})",
        ["client", "MB/s"],
        [[name, f"{median(v):.0f}"] for name, v in rates.items()],
    )
    print_table(
        f"evaluation epoch, batch 64, 224x224, median of {args.repeats} ({load_average()})",
        ["source", "first batch s", "steady images/s", "images"],
        [
            [
                name,
                f"{median([r[0] for r in v]):.2f}",
                f"{median([r[1] for r in v]):.0f}",
                v[0][2],
            ]
            for name, v in rows.items()
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
