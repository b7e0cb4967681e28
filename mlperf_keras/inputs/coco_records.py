"""COCO detection records as data_prep.coco writes them, for both detectors (SSD, inputs/ssd.py, and Mask R-CNN,
inputs/maskrcnn.py): the record features, one record parsed to boxes, labels and crowd flags, crowd objects dropped,
images without objects recognised, images counted.
"""
from __future__ import annotations

import tensorflow as tf

from mlperf_keras.inputs import records

DETECTION_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/id": tf.io.FixedLenFeature([], tf.int64),
    "image/height": tf.io.FixedLenFeature([], tf.int64),
    "image/width": tf.io.FixedLenFeature([], tf.int64),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
}


def parse_detection(serialized) -> dict:
    """One COCO detection record -> {"jpeg": string, "boxes": float32 [n, 4] ltrb normalised, "labels": int32 [n],
    "is_crowd": bool [n], "image_id": int64, "height": int32, "width": int32}."""
    ex = records.parse(serialized, DETECTION_FEATURES)
    coords = [ex[f"image/object/bbox/{k}"].values for k in ("xmin", "ymin", "xmax", "ymax")]
    labels = ex["image/object/class/label"].values
    crowd = ex["image/object/is_crowd"].values
    n = tf.size(labels)
    checks = [tf.debugging.assert_equal(tf.size(v), n, message=f"COCO record: {name} and class/label differ in length")
              for v, name in zip(coords + [crowd], ("bbox/xmin", "bbox/ymin", "bbox/xmax", "bbox/ymax", "is_crowd"))]
    with tf.control_dependencies(checks):
        boxes = tf.stack(coords, axis=1)
    return {"jpeg": ex["image/encoded"], "boxes": tf.reshape(boxes, [-1, 4]), "labels": tf.cast(labels, tf.int32),
            "is_crowd": tf.not_equal(crowd, 0), "image_id": ex["image/id"],
            "height": tf.cast(ex["image/height"], tf.int32), "width": tf.cast(ex["image/width"], tf.int32)}


def drop_crowd(example: dict) -> dict:
    keep = tf.logical_not(example["is_crowd"])
    return {**example, "boxes": tf.boolean_mask(example["boxes"], keep),
            "labels": tf.boolean_mask(example["labels"], keep), "is_crowd": tf.boolean_mask(example["is_crowd"], keep)}


def has_objects(example: dict):
    return tf.size(example["labels"]) > 0


_COUNT_FEATURES = {"image/object/class/label": tf.io.VarLenFeature(tf.int64),
                   "image/object/is_crowd": tf.io.VarLenFeature(tf.int64)}


def count_images(paths: list[str], *, skip_empty: bool = True, skip_crowd: bool = False) -> int:
    """How many images of `paths` the SSD datasets use: all, or (skip_empty) those with an object (not counting
    crowd objects when skip_crowd). Reads the files once (the val2017 count is MLPerf's eval_samples, 4952)."""
    def objects(serialized):
        ex = records.parse(serialized, _COUNT_FEATURES)
        crowd = ex["image/object/is_crowd"].values
        return tf.reduce_sum(tf.cast(tf.equal(crowd, 0), tf.int64)) if skip_crowd else tf.size(
            ex["image/object/class/label"].values, out_type=tf.int64)

    dataset = records.record_dataset(paths).map(objects, num_parallel_calls=records.AUTOTUNE)
    if skip_empty:
        dataset = dataset.filter(lambda k: k > 0)
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda total, _: total + 1).numpy())


__all__ = ["DETECTION_FEATURES", "count_images", "drop_crowd", "has_objects", "parse_detection"]
