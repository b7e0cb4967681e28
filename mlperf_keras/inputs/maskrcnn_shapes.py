"""The padded image shapes of Mask R-CNN's batches and the arithmetic of its grouped passes, without TensorFlow (the
workload sizes its synthetic batches, prints its dry run and plans its epochs from them on a JAX-only machine; both
input pipelines, inputs/maskrcnn.py (tf.data) and inputs/maskrcnn_jax.py, pad to these shapes and follow these
rules).

As the reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch/, config
configs/e2e_mask_rcnn_R_50_FPN_1x.yaml over maskrcnn_benchmark/config/defaults.py): INPUT.MIN_SIZE_TRAIN 800,
MAX_SIZE_TRAIN 1333, DATALOADER.SIZE_DIVISIBILITY 32; the orientation groups are GroupedBatchSampler's
(maskrcnn_benchmark/data/samplers/grouped_batch_sampler.py), the passes back to back IterationBasedBatchSampler's
(data/samplers/iteration_based_batch_sampler.py).
"""
from __future__ import annotations

import math

from mlperf_keras.inputs.manifest import DataError

MIN_SIZE, MAX_SIZE = 800, 1333          # INPUT.MIN_SIZE_TRAIN / MAX_SIZE_TRAIN (and _TEST)
SIZE_DIVISIBILITY = 32                  # DATALOADER.SIZE_DIVISIBILITY
LANDSCAPE, PORTRAIT = 0, 1              # GroupedBatchSampler's groups: height / width < 1, >= 1
MAX_VERTICES = 256                      # polygon edges per object when no manifest gives COCO's
PAD_RGB = (123, 116, 103)               # Detectron's PIXEL_MEAN (BGR 102.98, 115.95, 122.77) as RGB uint8


def padded_shape(group: int, min_size: int = MIN_SIZE, max_size: int = MAX_SIZE) -> tuple[int, int]:
    """(height, width) every image of an orientation group is padded to: the resized image's bounds rounded up to
    multiples of 32 (landscape: height <= min_size, width <= max_size)."""
    short = int(math.ceil(min_size / SIZE_DIVISIBILITY) * SIZE_DIVISIBILITY)
    long = int(math.ceil(max_size / SIZE_DIVISIBILITY) * SIZE_DIVISIBILITY)
    return (short, long) if group == LANDSCAPE else (long, short)


def grouped_batches_needed(groups: tuple[int, int], batch_size: int) -> int:
    """Batches of one pass over (landscape, portrait) images: each group's last, partial batch filled."""
    return sum(math.ceil(n / batch_size) for n in groups)


def check_epoch_fits(groups: tuple[int, int], batch_size: int, num_batches: int, paths,
                     limit: str | None = None) -> None:
    """DataError unless the worker has a trainable image and its grouped batches number at most num_batches
    (limit: how the message names that bound)."""
    if sum(groups) == 0:
        raise DataError(f"no trainable image in {list(paths)[:3]}... (Mask R-CNN trains on images with an object "
                        f"wider and taller than 1 pixel)")
    needed = grouped_batches_needed(groups, batch_size)
    if needed > num_batches:
        raise DataError(f"this worker's record files hold {groups[0]} landscape and {groups[1]} portrait trainable "
                        f"images: {needed} batches of {batch_size}, more than {limit or f'its {num_batches} per epoch'}"
                        f"; the train shards are unbalanced over the workers (prepare the data with a number of "
                        f"train shards that is a multiple of the worker count, or use fewer workers)")


def check_pass_fits(groups: tuple[int, int], batch_size: int, steps_per_epoch: int, paths) -> None:
    """A worker's pass over its images may outlast an epoch by the one batch that the two orientation groups' last,
    partial batches can add to the reference's epoch_size // batch + 1; a longer pass means this worker holds more
    than its share of the images (DataError)."""
    check_epoch_fits(groups, batch_size, steps_per_epoch + 1, paths,
                     limit=f"the {steps_per_epoch} of an epoch by more than one")


def stream_position(batch: int, pass_batches: int) -> tuple[int, int]:
    """(data pass, batches into it) of the `batch`-th batch of a worker's training stream: passes of pass_batches
    batches each, back to back, as IterationBasedBatchSampler re-runs the grouped batch sampler (data/samplers/
    iteration_based_batch_sampler.py at 0badcd17); epoch k starts at batch k x steps_per_epoch."""
    return divmod(int(batch), int(pass_batches))


__all__ = ["LANDSCAPE", "MAX_SIZE", "MAX_VERTICES", "MIN_SIZE", "PAD_RGB", "PORTRAIT", "SIZE_DIVISIBILITY",
           "check_epoch_fits", "check_pass_fits", "grouped_batches_needed", "padded_shape", "stream_position"]
