"""SSD's augmentation settings, shared by the tf.data path (inputs/ssd.py) and the JAX path (inputs/ssd_jax.py),
without TensorFlow: the reference's SSDCropping modes, the legal crop attempts, ColorJitter's ranges, and the
check that a worker's epoch holds each of its images.
"""
from __future__ import annotations

import numpy as np

from mlperf_keras.config import ConfigError
from mlperf_keras.inputs.manifest import DataError

# SSDCropping's sample_options: index 0 keeps the whole image; the others bound every box's IoU with the crop to
# (min, max), strictly. The reference's max is +inf in every mode and "no IoU constraint" is (-inf, +inf).
CROP_MIN_IOU = (np.nan, 0.1, 0.3, 0.5, 0.7, 0.9, -np.inf)
CROP_MAX_IOU = (np.nan, np.inf, np.inf, np.inf, np.inf, np.inf, np.inf)
MAX_SAMPLES_ALLOWED = (1, 50)   # MLPerf's legal values of max_samples (num_cropping_iterations)

COLOR_JITTER = dict(brightness=0.125, contrast=0.5, saturation=0.5, hue=0.05)


def check_max_samples(max_samples: int):
    if int(max_samples) not in MAX_SAMPLES_ALLOWED:
        raise ConfigError(f"max_samples={max_samples}: MLPerf allows {MAX_SAMPLES_ALLOWED} "
                          "(the reference's num_cropping_iterations)")


def check_epoch_fits(num_images: int, batch_size: int, num_batches: int, paths) -> None:
    """A worker's epoch (num_batches x batch_size samples) must hold each of its num_images trainable images."""
    if num_images <= 0:
        raise DataError(f"no image with an object in {list(paths)[:3]}...: no trainable image (SSD needs images "
                        f"with annotations)")
    if num_images > num_batches * batch_size:
        raise DataError(f"this worker's record files hold {num_images} trainable images, more than its "
                        f"{num_batches} x {batch_size} samples per epoch: the train shards are unbalanced over the "
                        f"workers (prepare the data with a number of train shards that is a multiple of the worker "
                        f"count, or use fewer workers)")


__all__ = ["COLOR_JITTER", "CROP_MAX_IOU", "CROP_MIN_IOU", "MAX_SAMPLES_ALLOWED", "check_epoch_fits",
           "check_max_samples"]
