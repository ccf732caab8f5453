"""The training-side reader: a converted dataset's shards to a batched, distributed tf.data pipeline.

dataset.py assembles it (`make_dataset`), files.py finds a split's shards (`steps_per_epoch`),
shard_records.py reads one shard's records, shares.py splits the records between input
pipelines, pieces.py cuts a small split's shards into pieces, batches.py batches and decodes,
decode.py turns records into images (bands.py: any depth and band count; modality.py: stored
pixels back to the source's units), crops.py holds the crop windows; epoch_order.py,
partitions.py and resumable.py the training epoch order, its partitions and `start_step`,
keras_resume.py the callbacks for Keras `fit` (import Keras when called); options.py
make_dataset's option groups, detection.py and objects.py the detection and segmentation
targets. TensorFlow and the core only, never Beam.
"""

from pipeline.reader.dataset import make_dataset
from pipeline.reader.detection import Detection
from pipeline.reader.files import dataset_info, steps_per_epoch
from pipeline.reader.keras_resume import backup_and_restore, resume_callback
from pipeline.reader.options import Classification, Order, Pixels, Storage

__all__ = [
    "Classification",
    "Detection",
    "Order",
    "Pixels",
    "Storage",
    "backup_and_restore",
    "dataset_info",
    "make_dataset",
    "resume_callback",
    "steps_per_epoch",
]
