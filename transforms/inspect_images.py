"""Inspect: read each listed file, hash it, fully decode it, and keep it or reject it with a reason."""

from __future__ import annotations

import concurrent.futures
import hashlib

import apache_beam as beam
import threadpoolctl
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from core import storage
from core.rejects import Rejected, decoder_error, make_reject
from transforms.elements import InspectedImage, ListedFile
from transforms.images.check import check_image
from transforms.images.limits import CheckOptions, check_file_size
from transforms.images.phash import pack
from transforms.keys import stats_fraction, wants_stats
from transforms.tiles.scenes import HEADER_FIRST_BYTES, inspect_scene, refuse_whole_scene

__all__ = ["InspectImages", "inspect_bytes"]


def inspect_bytes(
    item: ListedFile, data: bytes, opts: CheckOptions, compute_stats: bool
) -> InspectedImage:
    """ListedFile + its bytes -> InspectedImage. Raises Rejected."""
    info = check_image(data, opts, compute_stats=compute_stats)
    return InspectedImage.of(
        item,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        format=info.format,
        source_format=info.source_format,
        height=info.height,
        width=info.width,
        channels=info.channels,
        transcode=info.transcode,
        stats=list(info.stats) if info.stats is not None else None,
        phash=info.phash,
        phash_crops=pack(info.phash_crops) if info.phash_crops is not None else None,
    )


class _InspectFn(beam.DoFn):
    """[ListedFile] -> [InspectedImage], and a Reject per bad file on the REJECTED output.

    Bucket objects are read on a small thread pool so that per-object latency does not
    serialise the batch; local files are read by the checking thread. Files are checked on
    `decode_threads` threads (decoders release the GIL).
    Outputs keep input order.
    """

    REJECTED = "rejected"

    def __init__(self, config):
        self._opts = config.check
        self._concurrency = config.read_concurrency
        self._decode_threads = config.decode_threads
        self._tiles = config.tiles.size if config.tiles else None  # a TIFF: by its header
        self._stats_split = config.train_split if config.analyze else None
        self._stats_fraction = config.stats_sample_fraction
        self._stats_max_images = config.stats_max_images
        self._seed = config.seed
        self._ok = Metrics.counter("imgrec", "inspected_ok")
        self._bytes = Metrics.counter("imgrec", "inspected_bytes")
        self._transcoded = Metrics.counter("imgrec", "inspected_needs_transcode")

    def setup(self):
        # Import the decoder once here: otherwise every pool thread's first check waits on
        # Python's import lock while one of them imports TensorFlow.
        import tensorflow  # noqa: F401

        # A worker is one core's (a process per core, or a decode thread per core): BLAS's own
        # threads (the perceptual hash's products) would spin on the other workers' cores.
        threadpoolctl.threadpool_limits(limits=1, user_api="blas")

        if self._opts.jpeg_verify == "strict":
            import simplejpeg  # noqa: F401  (a missing package fails here, not once per file)

        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._concurrency, thread_name_prefix="imgrec-read"
        )
        self._decode_pool = (
            concurrent.futures.ThreadPoolExecutor(
                max_workers=self._decode_threads, thread_name_prefix="imgrec-decode"
            )
            if self._decode_threads > 1
            else None
        )

    def teardown(self):
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._decode_pool is not None:
            self._decode_pool.shutdown(wait=False, cancel_futures=True)

    def _wants_stats(self, item: ListedFile, fraction: float) -> bool:
        return wants_stats(item, self._stats_split, fraction, self._seed)

    def _read(self, item: ListedFile):
        """Runs on the I/O pool: (bytes, None), or (None, Reject) for an unreadable file."""
        try:
            if item.size >= 0:  # Known from the listing: refuse empty/huge files unread.
                check_file_size(item.size, self._opts)
            if item.size >= HEADER_FIRST_BYTES and self._tiles is None:
                refuse_whole_scene(item.path, self._opts)  # before holding its bytes
            return storage.read_bytes(item.path), None
        except Rejected as e:
            return None, make_reject(item.path, e.reason, e.detail)
        except storage.ReadError as e:
            return None, make_reject(item.path, "unreadable", e.detail)

    def _check(self, item: ListedFile, read: concurrent.futures.Future | None, fraction: float):
        """(InspectedImage, None) or (None, Reject) once the file's read completes (a local
        file, `read` None, is read here, on the calling thread)."""
        try:
            if self._tiles and read is None:
                stats_chip = self._tiles if self._wants_stats(item, fraction) else None
                scene = inspect_scene(item, self._opts, stats_chip)  # None: not a TIFF
                if scene is not None:
                    return scene, None
            data, reject = read.result() if read is not None else self._read(item)
            if reject is not None:
                return None, reject
            return inspect_bytes(item, data, self._opts, self._wants_stats(item, fraction)), None
        except Rejected as e:
            return None, make_reject(item.path, e.reason, e.detail)
        except storage.StoreOutageError:
            raise  # the store is down: stop the job (the only per-file failure that may)
        except OSError as e:  # a scene's stream (--tile) failed to open or read
            return None, make_reject(item.path, "unreadable", f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001  (the per-file dead-letter boundary)
            return None, decoder_error(item.path, e)

    def process(self, batch: list[ListedFile], num_listed: int = 0):
        fraction = stats_fraction(self._stats_fraction, self._stats_max_images, num_listed)
        # Reads overlap on the I/O pool (bucket latency). Decoding runs on `decode_threads`
        # threads, one per core this worker may use: more only contend for the cores.
        # Local files are read on the decoding thread itself: a pool hand-off costs more CPU
        # than the read (docs/benchmarks.md).
        # With --tile, every file is first opened as a possible scene (never read whole).
        reads = [
            None
            if storage.is_local(item.path) or self._tiles
            else self._pool.submit(self._read, item)
            for item in batch
        ]
        if self._decode_pool is None:
            results = (
                self._check(item, read, fraction) for item, read in zip(batch, reads, strict=True)
            )
        else:
            checks = [
                self._decode_pool.submit(self._check, item, read, fraction)
                for item, read in zip(batch, reads, strict=True)
            ]
            results = (check.result() for check in checks)
        inspected = []
        for value, reject in results:
            if reject is not None:
                Metrics.counter("imgrec", f"rejected_{reject['reason']}").inc()
                yield pvalue.TaggedOutput(self.REJECTED, reject)
                continue
            self._ok.inc()
            self._bytes.inc(value.size)
            if value.transcode:
                self._transcoded.inc()
            inspected.append(value)
        if inspected:
            yield inspected


class InspectImages(beam.PTransform):
    """[ListedFile] -> {"inspected": [InspectedImage], "rejected": Reject}.

    Batches in, batches out: Beam's per-element cost is paid per batch, not per file. With
    `num_listed` (a singleton PCollection), pixel statistics are sampled down to about
    --stats_max_images training images.
    """

    def __init__(self, config, num_listed=None):
        super().__init__()
        self._config = config
        self._num_listed = num_listed

    def expand(self, listed):
        side = {}
        if self._num_listed is not None and self._config.stats_max_images:
            side["num_listed"] = pvalue.AsSingleton(self._num_listed)
        out = listed | "ReadHashDecode" >> beam.ParDo(
            _InspectFn(self._config), **side
        ).with_outputs(_InspectFn.REJECTED, main="inspected")
        return {"inspected": out.inspected, "rejected": out[_InspectFn.REJECTED]}
