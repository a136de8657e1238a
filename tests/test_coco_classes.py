"""The 80-label <-> sparse COCO id table, against the real annotation file where present."""

from __future__ import annotations

import json

import pytest

from clearsight.detection.coco_classes import (
    COCO_IDS,
    COCO_NAMES,
    coco_id_to_label,
    label_to_coco_id,
)


def test_every_label_round_trips_and_ids_are_sparse():
    assert len(COCO_IDS) == len(COCO_NAMES) == 80
    assert list(COCO_IDS) == sorted(set(COCO_IDS)) and COCO_IDS[0] == 1 and COCO_IDS[-1] == 90
    for label in range(80):
        assert coco_id_to_label(label_to_coco_id(label)) == label
    assert label_to_coco_id(11) == 13  # id 12 is unused: "stop sign" is label 11, id 13
    for bad_id in (0, 12, 26, 91):
        with pytest.raises(ValueError, match="not a COCO category id"):
            coco_id_to_label(bad_id)
    with pytest.raises(ValueError, match="0..79"):
        label_to_coco_id(80)


@pytest.mark.realdata
def test_table_matches_the_val2017_categories(shared_data):
    path = shared_data / "detection/coco_mini_val/annotations/instances_val2017.json"
    cats = json.loads(path.read_text())["categories"]
    assert [(c["id"], c["name"]) for c in sorted(cats, key=lambda c: c["id"])] == list(
        zip(COCO_IDS, COCO_NAMES, strict=True)
    )
