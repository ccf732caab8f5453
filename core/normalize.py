"""The dataset's exported normalisation (tensorflow-transform), for the reader and for serving.

Importable without Apache Beam: training and serving code load the TFT export only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["IMAGE", "LABEL", "normalize_layer"]

# Keys of the exported transform's serving interface (inputs and outputs alike):
# {"image": uint8 [B, H, W, 3], "label": string [B]} -> {"image": float32, "label": int64 [B]}.
IMAGE = "image"
LABEL = "label"


def normalize_layer(data_dir: str) -> Callable[[Any], Any]:
    """The dataset's exported normalisation, for the reader and for serving.

    Returns a function: images [B, H, W, 3] -> float32 [B, H, W, 3], each channel
    `(x - pixel_mean) / pixel_std` with the training split's statistics. Images are uint8, or any
    real dtype on the 0..255 scale (e.g. after `tf.image.resize`), rounded to uint8 first as the
    transform's input is uint8. Works eagerly, in `tf.data.Dataset.map` and in a `tf.function`.
    The TFT layer it wraps is `fn.tft_layer`: attach it to a module you save
    (`module.tft_layer = fn.tft_layer`) so the transform's assets travel with it.

    Args:
        data_dir: a converted dataset (holding `transform_fn/`), local or gs://.

    Returns:
        The normalising function, with the TFT layer as its `tft_layer` attribute.
    """
    import tensorflow as tf
    import tensorflow_transform as tft

    layer = tft.TFTransformOutput(data_dir).transform_features_layer()

    def normalize(images):
        images = tf.convert_to_tensor(images)
        if images.dtype != tf.uint8:
            images = tf.cast(tf.clip_by_value(tf.round(images), 0, 255), tf.uint8)
        # TFT's output schema cannot describe a dense image of unknown size, so the transform
        # returns a RaggedTensor with uniform rows; densify it and restore the static shape.
        out = layer({IMAGE: images})[IMAGE].to_tensor()
        out.set_shape(images.shape)
        return out

    normalize.tft_layer = layer
    return normalize
