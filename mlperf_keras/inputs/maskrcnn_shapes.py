"""The padded image shapes of Mask R-CNN's batches, without TensorFlow (the workload sizes its synthetic batches and
prints its dry run from them on a JAX-only machine; inputs/maskrcnn.py pads to them).

As the reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/, config
configs/e2e_mask_rcnn_R_50_FPN_1x.yaml over maskrcnn_benchmark/config/defaults.py): INPUT.MIN_SIZE_TRAIN 800,
MAX_SIZE_TRAIN 1333, DATALOADER.SIZE_DIVISIBILITY 32; the orientation groups are GroupedBatchSampler's
(maskrcnn_benchmark/data/samplers/grouped_batch_sampler.py).
"""
from __future__ import annotations

import math

MIN_SIZE, MAX_SIZE = 800, 1333          # INPUT.MIN_SIZE_TRAIN / MAX_SIZE_TRAIN (and _TEST)
SIZE_DIVISIBILITY = 32                  # DATALOADER.SIZE_DIVISIBILITY
LANDSCAPE, PORTRAIT = 0, 1              # GroupedBatchSampler's groups: height / width < 1, >= 1


def padded_shape(group: int, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE) -> tuple[int, int]:
    """(height, width) every image of an orientation group is padded to: the resized image's bounds rounded up to
    multiples of 32 (landscape: height <= min_size, width <= max_size)."""
    short = int(math.ceil(min_size / SIZE_DIVISIBILITY) * SIZE_DIVISIBILITY)
    long = int(math.ceil(max_size / SIZE_DIVISIBILITY) * SIZE_DIVISIBILITY)
    return (short, long) if group == LANDSCAPE else (long, short)


__all__ = ["LANDSCAPE", "MAX_SIZE", "MIN_SIZE", "PORTRAIT", "SIZE_DIVISIBILITY", "padded_shape"]
