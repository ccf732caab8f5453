"""--tile through whole conversions: GeoTIFFs written by GDAL (multi-band uint16 and float,
nodata borders, tiled and striped) and a photo; every chip against GDAL's (rasterio's) read of
its window, its keys and transform, splits by scene, accounting; the big-scene reject."""

from __future__ import annotations

import html
import json
import os

import numpy as np
import pytest
from PIL import Image

from core import schema
from core.tile_grid import chip_windows
from pipeline.report.page import build_report
from pipeline.verify import verify_dataset
from tests.runs import in_process, read_records

tf = pytest.importorskip("tensorflow")
rasterio = pytest.importorskip("rasterio")
from rasterio.transform import Affine  # noqa: E402
from rasterio.windows import Window  # noqa: E402

pytestmark = pytest.mark.integration

_TILE, _OVERLAP = (64, 48), 8
_QUIET = ("--no_analyze", "--no_report")


def _geotiff(path: str, bands: np.ndarray, **profile) -> None:
    count, height, width = bands.shape
    transform = Affine(10.0, 0.0, 500000.0 + 1000 * len(path), 0.0, -10.0, 4650000.0)
    with rasterio.open(
        path, "w", driver="GTiff", height=height, width=width, count=count,
        dtype=bands.dtype, crs="EPSG:32633", transform=transform, **profile,
    ) as dst:  # fmt: skip
        dst.write(bands)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    """Six GDAL scenes (uint16 x4 tiled with a nodata border, float32 striped with NaN nodata)
    and a photo, in one class folder."""
    root = tmp_path_factory.mktemp("scenes")
    folder = root / "fields"
    folder.mkdir()
    rng = np.random.default_rng(69)
    for k in range(3):
        bands = rng.integers(1, 65536, (4, 150 + k, 170), dtype=np.uint16)
        bands[:, :, :20] = 0  # a nodata border, as a scene's edge has
        _geotiff(str(folder / f"s2_{k}.tif"), bands, tiled=True, blockxsize=32, blockysize=32,
                 compress="deflate", interleave="band", nodata=0)  # fmt: skip
        heights = rng.normal(size=(1, 90, 110 + k)).astype(np.float32)
        heights[:, :10] = np.nan
        _geotiff(str(folder / f"dem_{k}.tif"), heights, blockysize=16, nodata=float("nan"))
    photo = rng.integers(0, 256, (130, 150, 3), dtype=np.uint8)
    Image.fromarray(photo).save(folder / "photo.png")
    return str(root)


def _convert(src: str, out: str, *flags: str) -> dict:
    in_process("convert", "--input", f"{src}/**", "--output", out, *_QUIET, *flags)
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        return json.load(f)


def _pixels(ex: dict) -> np.ndarray:
    """A record's stored pixels [H, W, C] in their dtype."""
    dtype = ex[schema.DTYPE].decode() or "uint8"
    shape = (ex[schema.HEIGHT], ex[schema.WIDTH], ex[schema.CHANNELS])
    if ex[schema.FORMAT] == b"raw":
        return np.frombuffer(ex[schema.ENCODED], np.dtype(dtype).newbyteorder("<")).reshape(shape)
    tf_dtype = tf.uint16 if dtype == "uint16" else tf.uint8
    return tf.io.decode_png(ex[schema.ENCODED], dtype=tf_dtype).numpy()


def _chips(out: str, info: dict) -> list[tuple[str, str, dict]]:
    """(split, shard file, parsed record) of every record."""
    found = []
    for split, entry in info["splits"].items():
        for shard in entry["shards"]:
            for rec in read_records(os.path.join(out, shard["file"])):
                ex = tf.io.parse_single_example(rec, schema.feature_spec())
                found.append((split, shard["file"], {k: v.numpy() for k, v in ex.items()}))
    return found


def _expected(path: str, ex: dict) -> tuple[np.ndarray, list[float] | None]:
    """GDAL's window (a photo's: Pillow's pixels) and GDAL's window transform of a record."""
    y, x = int(ex[schema.TILE_Y]), int(ex[schema.TILE_X])
    height, width = int(ex[schema.HEIGHT]), int(ex[schema.WIDTH])
    if path.endswith(".png"):
        return np.asarray(Image.open(path))[y : y + height, x : x + width], None
    with rasterio.open(path) as src:
        window = Window(x, y, width, height)
        samples = np.moveaxis(src.read(window=window), 0, 2)
        return samples, list(src.window_transform(window).to_gdal())


def _valid(path: str, w) -> float:
    """GDAL's valid fraction of a window (its dataset mask); a photo's pixels are all valid."""
    if path.endswith(".png"):
        return 1.0
    with rasterio.open(path) as src:
        mask = src.dataset_mask(window=Window(w.x, w.y, w.width, w.height))
    return np.count_nonzero(mask) / mask.size


def test_every_chip_equals_its_gdal_window_and_no_scene_straddles_splits(corpus, tmp_path):
    out = str(tmp_path / "out")
    info = _convert(
        corpus, out, "--tile", "64x48", "--tile_overlap", "8", "--bit_depth", "16",
        "--splits", "train=0.5,validation=0.5", "--min_shards", "3", "--tile_min_valid", "0.6",
    )  # fmt: skip
    assert (info["num_listed"], info["num_written"], info["num_rejected"]) == (7, 7, 0)
    skipped = info["tiles"]["skipped_by_scene"]
    records = _chips(out, info)
    by_source: dict[str, list] = {}
    for split, shard, ex in records:
        by_source.setdefault(ex[schema.FILENAME].decode(), []).append((split, shard, ex))
    assert len(by_source) == 7
    for path, chips in by_source.items():
        first = chips[0][2]
        sides = int(first[schema.TILE_SOURCE_HEIGHT]), int(first[schema.TILE_SOURCE_WIDTH])
        grid = chip_windows(*sides, _TILE, _OVERLAP)
        kept = {(w.y, w.x) for w in grid if _valid(path, w) >= 0.6}
        found = [(int(ex[schema.TILE_Y]), int(ex[schema.TILE_X])) for _, _, ex in chips]
        assert sorted(found) == sorted(kept), path  # every chip valid enough, once
        assert skipped.get(path, 0) == len(grid) - len(kept), path
        assert len({split for split, _, _ in chips}) == 1, path  # the scene is the group
        for _, _, ex in chips:
            pixels, transform = _expected(path, ex)
            got = _pixels(ex)
            assert got.dtype == pixels.dtype, path
            np.testing.assert_array_equal(got, pixels, err_msg=path)
            if transform is not None:
                np.testing.assert_allclose(json.loads(ex["geo/transform"]), transform)
                assert ex["geo/epsg"] == 32633
                assert ex["geo/nodata"].decode() in ("0", "nan")
    assert sum(skipped.values()) == info["tiles"]["num_chips_skipped"] > 0
    assert set(skipped) == {os.path.join(corpus, "fields", f"s2_{k}.tif") for k in range(3)}
    page = build_report(out)  # each scene's overview, its chips and skipped ones counted
    assert "<h2 id=scenes>Scenes</h2>" in page
    captions = [
        f"{html.escape(path)}: {len(chips)} chips shown, {skipped.get(path, 0)} skipped"
        for path, chips in by_source.items()
    ]
    assert sum(caption in page for caption in captions) == 6  # MAX_SCENES of the 7
    scene = by_source[os.path.join(corpus, "fields", "s2_0.tif")]
    assert len({shard for _, shard, _ in scene}) > 1  # a scene's chips spread over shards
    assert sum(entry["num_examples"] for entry in info["splits"].values()) == len(records)


def test_default_options_store_chips_at_8_bits(corpus, tmp_path):
    out = str(tmp_path / "out")
    info = _convert(corpus, out, "--tile", "64x48", "--tile_overlap", "8")
    assert (info["num_written"], info["num_rejected"]) == (7, 0)
    for _, _, ex in _chips(out, info):
        path = ex[schema.FILENAME].decode()
        assert ex[schema.TRANSCODE_REASON].decode().endswith("tile")
        if "s2_" not in path:
            continue
        samples, _ = _expected(path, ex)
        got = _pixels(ex)  # 16-bit samples as a viewer shows them: their range onto 0..255
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, np.rint(samples * (255 / 65535)).astype(np.uint8))
    assert verify_dataset(out).ok
    info["tiles"]["num_chips_written"] += 1  # verify counts the chips it reads
    with open(os.path.join(out, schema.DATASET_INFO), "w") as f:
        json.dump(info, f)
    report = verify_dataset(out, decode=False)
    assert any("chips read, dataset_info.json says" in p for p in report.problems)


def test_a_scene_too_big_to_convert_whole_is_refused_from_its_header(tmp_path):
    src = tmp_path / "in" / "big"
    src.mkdir(parents=True)
    path = src / "scene.tif"
    # 12,000^2 declared pixels (over --max_pixels), a few MB of zlib tiles, the file padded
    # (sparse) past the size from which headers are read first.
    _geotiff(str(path), np.zeros((1, 12000, 12000), np.uint8), tiled=True, compress="deflate")
    with open(path, "r+b") as f:
        f.truncate(80 << 20)
    out = str(tmp_path / "out")
    in_process("convert", "--input", f"{tmp_path / 'in'}/**", "--output", out, *_QUIET,
               "--max_bad_fraction", "1")  # fmt: skip
    with open(os.path.join(out, schema.REJECTED)) as f:
        (reject,) = [json.loads(line) for line in f]
    assert reject["reason"] == "too_many_pixels"
    assert "--tile" in reject["detail"] and "it was not read" in reject["detail"]


# (x, y, w, h) of each object in the 400 x 300 photo; the last has a triangle as its outline.
_BOXES = {1: (20, 20, 40, 20), 2: (100, 10, 80, 40), 3: (300, 200, 60, 60)}


def _expected_boxes(y: int, x: int, height: int, width: int, min_object: float) -> dict:
    """{object id: (xmin, ymin, xmax, ymax) in the chip's pixels} of the objects at least
    `min_object` of whose box is inside the chip."""
    found = {}
    for oid, (bx, by, bw, bh) in _BOXES.items():
        x0, y0 = max(bx, x), max(by, y)
        x1, y1 = min(bx + bw, x + width), min(by + bh, y + height)
        if x1 > x0 and y1 > y0 and (x1 - x0) * (y1 - y0) >= min_object * bw * bh:
            found[oid] = (x0 - x, y0 - y, x1 - x, y1 - y)
    return found


def test_coco_boxes_masks_and_label_maps_are_cut_with_their_chips(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    photo = np.random.default_rng(5).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    Image.fromarray(photo).save(images / "big.png")
    coco = {
        "images": [{"id": 7, "file_name": "big.png", "width": 400, "height": 300}],
        "categories": [{"id": 1, "name": "car"}],
        "annotations": [
            {"id": oid, "image_id": 7, "category_id": 1, "bbox": list(box), "iscrowd": 0,
             "area": box[2] * box[3], "segmentation": [[300, 200, 360, 200, 360, 260]]}
            for oid, box in _BOXES.items()
        ],
    }  # fmt: skip
    (tmp_path / "coco.json").write_text(json.dumps(coco))
    (tmp_path / "masks").mkdir()
    label_map = np.random.default_rng(6).integers(0, 4, (300, 400), dtype=np.uint8)
    Image.fromarray(label_map).save(tmp_path / "masks" / "big.png")
    out = str(tmp_path / "out")
    info = _convert(
        str(images), out, "--annotations", str(tmp_path / "coco.json"), "--tile", "128",
        "--tile_min_object", "0.5", "--tile_keep_empty", "0.5", "--splits", "train=1",
        "--masks", str(tmp_path / "masks" / "{stem}.png"),
    )  # fmt: skip
    assert (info["num_written"], info["num_rejected"]) == (1, 0)
    spec = schema.feature_spec() | schema.object_feature_spec()
    chips, empty = {}, 0
    for shard in info["splits"]["train"]["shards"]:
        for rec in read_records(os.path.join(out, shard["file"])):
            ex = tf.io.parse_single_example(rec, spec)
            y, x = int(ex[schema.TILE_Y]), int(ex[schema.TILE_X])
            h, w = int(ex[schema.HEIGHT]), int(ex[schema.WIDTH])
            side = {k: tf.sparse.to_dense(ex[v]).numpy() for k, v in schema.OBJECT_BBOX.items()}
            boxes = np.stack([side["xmin"] * w, side["ymin"] * h, side["xmax"] * w,
                              side["ymax"] * h], axis=-1)  # fmt: skip
            expected = _expected_boxes(y, x, h, w, 0.5)
            np.testing.assert_allclose(boxes.reshape(-1, 4), list(expected.values()) or
                                       np.zeros((0, 4)), atol=1e-3)  # fmt: skip
            masks = tf.sparse.to_dense(ex[schema.OBJECT_MASK]).numpy()
            assert len(masks) == len(expected)
            for png in masks:
                assert tf.io.decode_png(png).shape[:2] == (h, w)
            pixels = tf.io.decode_png(ex[schema.ENCODED]).numpy()
            np.testing.assert_array_equal(pixels, photo[y : y + h, x : x + w])
            classes = tf.io.decode_png(ex[schema.SEGMENTATION]).numpy()[:, :, 0]
            np.testing.assert_array_equal(classes, label_map[y : y + h, x : x + w])
            assert ex[schema.SOURCE_ID].numpy().decode() == f"big.png#tile={y},{x}"
            chips[(y, x)] = sorted(expected)
            empty += not expected
    # 4 x 3 chips; the straddling car (2) only where half of it is: at x 128
    assert chips[(0, 0)] == [1] and chips[(0, 128)] == [2] and chips[(172, 272)] == [3]
    assert 0 < empty < 9  # of the 9 chips without objects, a deterministic part is kept


def test_a_versioned_rerun_reads_only_the_changed_scenes_chips(tmp_path, monkeypatch):
    """Scene b rewritten: its chips are read again; scene a's are spliced from the previous
    version's shards (or its shards copied whole), and the version equals a fresh run's."""
    from tests.integration.test_incremental import _run, snapshot
    from transforms.images import decoder_pool

    reads: list[str] = []
    real = decoder_pool.window

    def counting(path, y, x, *args):
        if (y, x) != (0, 0) or args[:2] != (1, 1):  # a chip's read, not inspection's pixel
            reads.append(os.path.basename(path))
        return real(path, y, x, *args)

    monkeypatch.setattr(decoder_pool, "window", counting)
    src = tmp_path / "in" / "fields"
    src.mkdir(parents=True)
    rng = np.random.default_rng(8)
    for name in ("a", "b"):
        _geotiff(str(src / f"{name}.tif"), rng.integers(1, 60000, (4, 120, 130), np.uint16),
                 tiled=True, blockxsize=32, blockysize=32)  # fmt: skip
    args = ["--input", f"{tmp_path / 'in'}/**", "--tile", "40", "--splits", "train=1",
            "--min_shards", "4"]  # fmt: skip
    root = str(tmp_path / "root")
    _run([*args, "--output", root], versioned=True)
    assert sorted(set(reads)) == ["a.tif", "b.tif"]
    reads.clear()
    _geotiff(str(src / "b.tif"), rng.integers(1, 60000, (4, 120, 130), np.uint16),
             tiled=True, blockxsize=32, blockysize=32)  # fmt: skip
    second, counters = _run([*args, "--output", root], versioned=True)
    assert reads.count("b.tif") == 12 and "a.tif" not in reads  # 3 x 4 chips of 40 each
    assert counters["records_spliced"] > 0  # a's chips in the shards b's chips changed
    fresh, _ = _run([*args, "--output", str(tmp_path / "fresh")], versioned=True)
    assert snapshot(second) == snapshot(fresh)
