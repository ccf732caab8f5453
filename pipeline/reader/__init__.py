"""The training-side reader: a converted dataset's shards to a batched, distributed tf.data pipeline.

dataset.py assembles it (`make_dataset`), files.py finds a split's shards (`steps_per_epoch`),
shares.py splits the records between input pipelines, decode.py turns records into images,
crops.py holds the crop windows. TensorFlow and the core only, never Beam.
"""

from pipeline.reader.dataset import make_dataset
from pipeline.reader.files import steps_per_epoch

__all__ = ["make_dataset", "steps_per_epoch"]
