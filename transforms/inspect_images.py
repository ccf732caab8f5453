"""Inspect: read each listed file, hash it, fully decode it, and keep it or reject it with a reason."""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics
from apache_beam.transforms import window

from pipeline import storage
from transforms.image_check import CheckOptions, Rejected, check_file_size, check_image
from transforms.keys import unit_hash

__all__ = ["InspectImages", "check_options", "inspect_bytes"]


def check_options(config) -> CheckOptions:
    """The per-image limits of a ConvertConfig."""
    return CheckOptions(
        max_pixels=config.max_pixels,
        min_side=config.min_side,
        max_file_mb=config.max_file_mb,
        apply_exif_orientation=config.apply_exif_orientation,
        animated=config.animated,
        transcode=config.transcode,
        max_side=config.max_side,
        jpeg_quality=config.jpeg_quality,
    )


def inspect_bytes(item: dict, data: bytes, opts: CheckOptions, compute_stats: bool) -> dict:
    """ListedFile + its bytes -> InspectedImage dict. Raises Rejected."""
    info = check_image(data, opts, compute_stats=compute_stats)
    return {
        **item,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "format": info.format,
        "source_format": info.source_format,
        "height": info.height,
        "width": info.width,
        "channels": info.channels,
        "transcode": info.transcode,
        "stats": list(info.stats) if info.stats is not None else None,
    }


class _InspectFn(beam.DoFn):
    """ListedFile -> InspectedImage, or a Reject on the REJECTED output.

    Files are read and checked on a small thread pool so that per-object latency on a bucket
    does not serialise the bundle; decoders release the GIL, so local files gain too. Outputs
    keep input order within a bundle.
    """

    REJECTED = "rejected"

    def __init__(self, config):
        self._opts = check_options(config)
        self._concurrency = config.read_concurrency
        self._stats_split = config.train_split if config.analyze else None
        self._stats_fraction = config.stats_sample_fraction
        self._seed = config.seed
        self._ok = Metrics.counter("imgrec", "inspected_ok")
        self._bytes = Metrics.counter("imgrec", "inspected_bytes")
        self._transcoded = Metrics.counter("imgrec", "inspected_needs_transcode")

    def setup(self):
        # Import the decoder once here: otherwise every pool thread's first check waits on
        # Python's import lock while one of them imports TensorFlow.
        import tensorflow  # noqa: F401

        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._concurrency, thread_name_prefix="imgrec-inspect"
        )

    def teardown(self):
        self._pool.shutdown(wait=False, cancel_futures=True)

    def start_bundle(self):
        self._pending = collections.deque()

    def _wants_stats(self, item: dict) -> bool:
        if item["split"] != self._stats_split:
            return False
        return self._stats_fraction >= 1.0 or (
            unit_hash("stats", self._seed, item["key"]) < self._stats_fraction
        )

    def _inspect(self, item: dict):
        try:
            if item["size"] >= 0:  # Known from the listing: refuse empty/huge files unread.
                check_file_size(item["size"], self._opts)
        except Rejected as e:
            return self.REJECTED, {"path": item["path"], "reason": e.reason, "detail": e.detail}
        try:
            data = storage.read_bytes(item["path"])
        except storage.ReadError as e:
            return self.REJECTED, {"path": item["path"], "reason": "unreadable", "detail": e.detail}
        try:
            return None, inspect_bytes(item, data, self._opts, self._wants_stats(item))
        except Rejected as e:
            return self.REJECTED, {"path": item["path"], "reason": e.reason, "detail": e.detail}

    def _emit(self, future):
        tag, value = future.result()
        if tag is None:
            self._ok.inc()
            self._bytes.inc(value["size"])
            if value["transcode"]:
                self._transcoded.inc()
            return value
        Metrics.counter("imgrec", f"rejected_{value['reason']}").inc()
        return pvalue.TaggedOutput(tag, value)

    def process(self, item: dict):
        self._pending.append(self._pool.submit(self._inspect, item))
        # Keep a few tasks per thread in flight; beyond that, hand results downstream.
        while len(self._pending) > 2 * self._concurrency:
            yield self._emit(self._pending.popleft())

    def finish_bundle(self):
        while self._pending:
            out = self._emit(self._pending.popleft())
            if isinstance(out, pvalue.TaggedOutput):
                yield pvalue.TaggedOutput(out.tag, window.GlobalWindows.windowed_value(out.value))
            else:
                yield window.GlobalWindows.windowed_value(out)


class InspectImages(beam.PTransform):
    """ListedFile -> {"inspected": InspectedImage, "rejected": Reject}."""

    def __init__(self, config):
        super().__init__()
        self._config = config

    def expand(self, listed):
        out = listed | "ReadHashDecode" >> beam.ParDo(_InspectFn(self._config)).with_outputs(
            _InspectFn.REJECTED, main="inspected"
        )
        return {"inspected": out.inspected, "rejected": out[_InspectFn.REJECTED]}
