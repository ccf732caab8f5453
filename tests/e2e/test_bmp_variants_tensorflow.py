"""Which BMP variants of tests/bmp_variants.py TensorFlow's decode_image decodes, asked in a
fresh process (its BMP decoder may corrupt the heap). How imgrec keeps them is checked in
tests/unit/test_bmp_variants.py."""

from __future__ import annotations

import os

from tests import bmp_variants

# What TensorFlow 2.21's decode_image does with each variant (measured by the test below):
# the variants it decodes must be kept; those it refuses are kept too, as every BMP Pillow reads.
TF_DECODES = {
    "rgb32bf",
    "rgba32abf",
    "rgb32-111110",
    "pal8oversize",
    "pal8os2v2-16",
    "rle8wrapping",
}


def test_tensorflow_decodes_the_variants_the_table_says(tmp_path):
    from tests.format_corpus import tf_decodable_paths

    paths = {}
    for name in bmp_variants.VARIANTS:
        path = os.path.join(tmp_path, name + ".bmp")
        with open(path, "wb") as f:
            f.write(bmp_variants.build(name)[0])
        paths[path] = name
    decoded = {paths[p] for p in tf_decodable_paths(sorted(paths))}
    assert decoded == TF_DECODES
