"""`imgrec convert --tile` as a user runs it: default options otherwise, GeoTIFFs GDAL wrote,
then `imgrec verify`, `imgrec inspect` and the reader on the chips."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from core import schema
from tests.runs import cli

rasterio = pytest.importorskip("rasterio")
from rasterio.transform import Affine  # noqa: E402

pytestmark = pytest.mark.e2e


def test_default_run_with_tile_converts_verifies_and_reads(tmp_path):
    src = tmp_path / "in" / "fields"
    src.mkdir(parents=True)
    rng = np.random.default_rng(3)
    for k in range(6):
        bands = rng.integers(1, 65536, (4, 130, 150 + k), dtype=np.uint16)
        bands[:, :8] = 0
        profile = dict(
            driver="GTiff", height=130, width=150 + k, count=4, dtype="uint16", nodata=0,
            crs="EPSG:32633", transform=Affine(10.0, 0, 500000.0, 0, -10.0, 4650000.0),
            tiled=k % 2 == 0, blockxsize=32, blockysize=32, compress="deflate",
        )  # fmt: skip
        with rasterio.open(src / f"scene{k}.tif", "w", **profile) as dst:
            dst.write(bands)
    out = str(tmp_path / "out")
    cli("convert", "--input", f"{tmp_path / 'in'}/**", "--output", out, "--tile", "64")
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        info = json.load(f)
    # 130 x 150..155: 3 x 3 chips each, every one kept
    assert (info["num_written"], info["num_rejected"]) == (6, 0)
    assert (
        info["tiles"]["num_chips_written"]
        == 54
        == sum(s["num_examples"] for s in info["splits"].values())
    )
    assert "pixel_mean" in info["statistics"]  # the scenes' first chips fed the statistics
    assert "imgrec verify: OK: 54 records" in cli("verify", out).stdout
    assert "chips            54   of 64x64 (overlap 0)" in cli("inspect", out).stdout
    from pipeline.reader import make_dataset

    train = info["splits"]["train"]["num_examples"]
    images = sum(int(b[0].shape[0]) for b in make_dataset(out, "train", 2, image_size=(64, 64)))
    assert images == train > 0
