"""The launcher's read of --annotations (transforms/load_annotations.py) and the join's matching
rules (transforms/match_annotations.py), on files written here."""

from __future__ import annotations

import json
import os

import pytest

from transforms.annotations.objects import AnnotationError, ImageAnnotations
from transforms.annotations.options import AnnotationOptions, mask_path, parse_mask_classes
from transforms.elements import ListedFile, PackedObjects
from transforms.load_annotations import (
    AnnotatedImage,
    load_annotations,
    read_part,
    split_of,
    stem_of,
)
from transforms.match_annotations import AmbiguousImageError, _find

pytestmark = pytest.mark.unit


def _coco(path, images, annotations, categories):
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)


def _load(tmp_path, *paths, **options):
    staging = str(tmp_path / "staging")
    return load_annotations(AnnotationOptions(paths=tuple(map(str, paths)), **options), staging)


def _image(i, name, w=100, h=80):
    return {"id": i, "file_name": name, "width": w, "height": h}


def _box(i, image_id, category_id, bbox=(10, 10, 20, 20)):
    return {"id": i, "image_id": image_id, "category_id": category_id, "bbox": list(bbox)}


def test_split_names_from_coco_and_yolo():
    assert split_of("/a/instances_train2017.json") == "train"
    assert split_of("/a/instances_val2017.json") == "validation"
    assert split_of("/a/person_keypoints_test.json") == "test"
    assert split_of("", "val") == "validation"
    assert stem_of("images/a.b.jpg") == "a.b" and stem_of(".hidden") == ".hidden"


def test_coco_ids_kept_and_staged_by_stem(tmp_path):
    _coco(
        tmp_path / "instances_train.json",
        [_image(1, "a.jpg"), _image(2, "sub/b.jpg")],
        [_box(1, 1, 7), _box(2, 2, 3), _box(3, 2, 7)],
        [{"id": 7, "name": "weld"}, {"id": 3, "name": "crack"}],
    )
    loaded = _load(tmp_path, tmp_path / "instances_train.json")
    assert loaded.options.label_map == ((3, "crack"), (7, "weld"))
    assert loaded.options.split_names == ("train",) and loaded.num_objects == 3
    staged = [i for n in range(loaded.options.num_parts) for i in read_part(_part(loaded, n))]
    by_stem = {i.stem: i for i in staged}
    assert set(by_stem) == {"a", "b"}
    assert by_stem["b"].candidates[0] == str(tmp_path / "sub" / "b.jpg")
    assert [o.class_text for o in by_stem["b"].objects.unpack().objects] == ["crack", "weld"]


def _part(loaded, n):
    from transforms.load_annotations import part_path

    return part_path(loaded.options.staged, n)


def test_relabel_contiguous_and_voc_names_after_coco_ids(tmp_path):
    _coco(
        tmp_path / "a.json",
        [_image(1, "a.jpg")],
        [_box(1, 1, 9)],
        [{"id": 9, "name": "car"}, {"id": 4, "name": "bus"}],
    )
    (tmp_path / "b.xml").write_text(
        "<annotation><filename>b.jpg</filename><size><width>50</width><height>40</height>"
        "</size><object><name>car</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax>"
        "<ymax>9</ymax></bndbox></object><object><name>van</name><bndbox><xmin>1</xmin>"
        "<ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>"
    )
    kept = _load(tmp_path, tmp_path / "a.json", tmp_path / "b.xml")
    assert kept.options.label_map == ((4, "bus"), (9, "car"), (10, "van"))
    assert kept.options.formats == ("coco", "voc")
    contiguous = _load(tmp_path, tmp_path / "a.json", tmp_path / "b.xml", relabel="contiguous")
    assert contiguous.options.label_map == ((1, "bus"), (2, "car"), (3, "van"))
    staged = [
        i for n in range(contiguous.options.num_parts) for i in read_part(_part(contiguous, n))
    ]
    voc = next(i for i in staged if i.stem == "b")
    assert [(o.class_id, o.class_text) for o in voc.objects.unpack().objects] == [
        (2, "car"),
        (3, "van"),
    ]


def test_yolo_folder_with_data_yaml_gives_class_k_plus_one(tmp_path):
    (tmp_path / "images" / "train").mkdir(parents=True)
    (tmp_path / "labels" / "train").mkdir(parents=True)
    (tmp_path / "data.yaml").write_text("train: images/train\nnames: [crack, weld]\n")
    (tmp_path / "labels" / "train" / "x.txt").write_text("1 0.5 0.5 0.2 0.2\n0 0.1 0.1 0.1 0.1\n")
    loaded = _load(tmp_path, tmp_path)
    assert loaded.options.label_map == ((1, "crack"), (2, "weld"))
    (image,) = read_part(_part(loaded, 0))
    assert image.any_extension and image.split == "train"
    assert image.candidates[0] == str(tmp_path / "images" / "train" / "x")
    assert [o.class_id for o in image.objects.unpack().objects] == [2, 1]


def test_names_list_that_no_label_file_uses_names_no_class(tmp_path):
    # CVAT's VOC export has ImageSets/Main/default.txt, a names-like list of image ids.
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "ImageSets" / "Main").mkdir(parents=True)
    (tmp_path / "ImageSets" / "Main" / "default.txt").write_text("frame_000000\nframe_000001\n")
    (tmp_path / "Annotations" / "frame_000000.xml").write_text(
        "<annotation><filename>frame_000000.jpg</filename><object><name>car</name><bndbox>"
        "<xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>"
    )
    loaded = _load(tmp_path, tmp_path)
    assert loaded.options.label_map == ((1, "car"),)


def test_bad_files_stop_the_read_naming_them(tmp_path):
    (tmp_path / "bad.json").write_text('{"images": [}')
    with pytest.raises(AnnotationError, match="bad.json"):
        _load(tmp_path, tmp_path / "bad.json")
    with pytest.raises(AnnotationError, match="no such file"):
        _load(tmp_path, tmp_path / "missing.json")
    _coco(tmp_path / "one.json", [_image(1, "a.jpg")], [], [{"id": 1, "name": "cat"}])
    _coco(tmp_path / "two.json", [_image(1, "b.jpg")], [], [{"id": 1, "name": "dog"}])
    with pytest.raises(AnnotationError, match=r"category 1.*'dog'.*'cat'|category 1.*'cat'.*'dog'"):
        _load(tmp_path, tmp_path / "one.json", tmp_path / "two.json")


def _listed(path, key):
    return ListedFile(path, key, "", "train", 1, None)


def _annotated(name, candidates=(), any_extension=False):
    objects = PackedObjects.pack(ImageAnnotations(name, None, None, ()))
    return AnnotatedImage(
        name, stem_of(name), tuple(candidates), "", "/ann/instances.json", 0, objects, any_extension
    )


def test_find_prefers_the_candidate_path_then_the_key_then_the_base_name():
    a, b = _listed("/d/x/a.jpg", "x/a.jpg"), _listed("/d/y/a.jpg", "y/a.jpg")
    assert _find(_annotated("a.jpg", ["/d/y/a.jpg"]), [a, b]) is b
    assert _find(_annotated("x/a.jpg"), [a, b]) is a
    assert _find(_annotated("a.jpg"), [a]) is a
    assert _find(_annotated("a.png"), [a]) is None
    with pytest.raises(AmbiguousImageError, match="/d/x/a.jpg or /d/y/a.jpg"):
        _find(_annotated("a.jpg"), [a, b])


def test_find_yolo_stem_takes_any_extension_in_its_images_folder():
    a, b = _listed("/d/images/train/a.png", "train/a.png"), _listed("/d/images/val/a.jpg", "a")
    assert _find(_annotated("a", ["/d/images/val/a"], any_extension=True), [a, b]) is b


def test_mask_templates_and_mask_classes():
    assert mask_path("/m/{stem}.png", "cat/a.b.jpg") == "/m/a.b.png"
    assert mask_path("/m/{key_stem}_mask.png", "cat/a.jpg") == "/m/cat/a_mask.png"
    assert mask_path("/m/{name}", "a.jpg") == "/m/a.jpg"
    assert parse_mask_classes("bg\nroad\n", "c.txt") == ((0, "bg"), (1, "road"))
    assert parse_mask_classes("0 bg\n255: void\n", "c.txt") == ((0, "bg"), (255, "void"))
    with pytest.raises(AnnotationError, match="c.txt, line 2"):
        parse_mask_classes("0 bg\nroad\n", "c.txt")
    with pytest.raises(ValueError, match="names no image"):
        AnnotationOptions(masks="/m/mask.png")


def test_staged_parts_hold_every_image_once(tmp_path):
    images = [_image(i, f"img{i:05d}.jpg") for i in range(1, 12_001)]
    _coco(tmp_path / "big.json", images, [], [{"id": 1, "name": "cat"}])
    loaded = _load(tmp_path, tmp_path / "big.json")
    assert loaded.options.num_parts == 3
    stems = [i.stem for n in range(3) for i in read_part(_part(loaded, n))]
    assert sorted(stems) == sorted(f"img{i:05d}" for i in range(1, 12_001))
    assert os.path.isdir(loaded.options.staged)
