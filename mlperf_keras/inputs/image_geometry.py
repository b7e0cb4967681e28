"""ResNet's image geometry in NumPy, for the input pipelines that do not run in TensorFlow (inputs/imagenet_gpu.py):
the JPEG header's size, the training crop window, and the bilinear taps of the resize to the model's size.

Each function is the arithmetic of the TensorFlow op the closed tf.data path (inputs/image.py) calls, in the same
float32 steps, so that given the same draws the pixels are the same:
- sample_crop_windows: tf.image.sample_distorted_bounding_box with the whole image as the only box
  (tensorflow/tensorflow tensorflow/core/kernels/image/sample_distorted_bounding_box_op.cc at 27b00cb:
  GenerateRandomCrop, SatisfiesOverlapConstraints, max_attempts tries then the whole image). The random numbers
  are NumPy's, not TensorFlow's Philox stream: the same distribution, not the same draws.
- resize_taps: tf.compat.v1.image.resize's bilinear kernel (align_corners=False, half_pixel_centers=False:
  source position = out * (in / out) in float32, lower = floor, upper = min(ceil, in - 1), lerp = position - lower),
  as tensorflow/core/kernels/image/resize_bilinear_op.cc's compute_interpolation_weights and LegacyScaler.
- eval_window: the closed path's eval resize (shorter side to resize_min, each side truncated as the reference's
  _smallest_size_at_least) and centre crop, as the part of the source image the crop's taps read.

Nothing here imports TensorFlow.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from mlperf_keras.inputs.manifest import DataError


@dataclasses.dataclass(frozen=True)
class CropParams:
    area_range: tuple = (0.05, 1.0)
    aspect_ratio_range: tuple = (0.75, 1.33)
    min_object_covered: float = 0.1
    max_attempts: int = 100


# JPEG start-of-frame markers (SOF0-SOF15 but DHT C4, JPG C8 and DAC CC), which hold the frame's size.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset(range(0xD0, 0xDA)) | {0x01}


def jpeg_size(jpeg: bytes) -> tuple[int, int]:
    """(height, width) from a JPEG's start-of-frame segment, reading no pixel data (tf.image.extract_jpeg_shape)."""
    if jpeg[:2] != b"\xff\xd8":
        raise DataError("record holds no JPEG (no start-of-image marker)")
    pos, end = 2, len(jpeg)
    while pos + 4 <= end:
        if jpeg[pos] != 0xFF:
            pos += 1
            continue
        marker = jpeg[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        length = (jpeg[pos + 2] << 8) | jpeg[pos + 3]
        if marker in _SOF and pos + 9 <= end:
            return (jpeg[pos + 5] << 8) | jpeg[pos + 6], (jpeg[pos + 7] << 8) | jpeg[pos + 8]
        pos += 2 + length
    raise DataError("JPEG has no start-of-frame segment")


def sample_crop_windows(heights, widths, rng: np.random.Generator, crop: CropParams = CropParams()) -> np.ndarray:
    """Training crop windows of images of the given sizes -> int64 [N, 4] (offset_y, offset_x, height, width).

    All max_attempts tries of every image are drawn at once; an image takes its first try that passes, or the
    whole image when none does, as the TensorFlow kernel does one try after another."""
    heights = np.asarray(heights, np.int64)[:, None]
    widths = np.asarray(widths, np.int64)[:, None]
    n, tries = heights.shape[0], crop.max_attempts
    f32 = np.float32
    lo_ratio, hi_ratio = f32(crop.aspect_ratio_range[0]), f32(crop.aspect_ratio_range[1])
    aspect = rng.random((n, tries), dtype=np.float32) * (hi_ratio - lo_ratio) + lo_ratio
    # float min_area = min_relative_crop_area * original_width * original_height (float times int, left to right)
    min_area = f32(crop.area_range[0]) * widths.astype(f32) * heights.astype(f32)
    max_area = f32(crop.area_range[1]) * widths.astype(f32) * heights.astype(f32)
    with np.errstate(divide="ignore", invalid="ignore"):
        height = np.rint(np.sqrt(min_area / aspect)).astype(np.int64)
        max_height = np.rint(np.sqrt(max_area / aspect)).astype(np.int64)
        too_wide = np.rint(max_height.astype(f32) * aspect) > widths
        # the smallest max_height with round(max_height * aspect) <= width, in double as the kernel's literals are
        narrowed = ((widths.astype(np.float64) + 0.5 - np.float64(f32(1e-7))) / aspect.astype(np.float64)).astype(
            np.int64)
        narrowed = np.where(np.rint(narrowed.astype(f32) * aspect) > widths, narrowed - 1, narrowed)
        max_height = np.where(too_wide, narrowed, max_height)
        max_height = np.minimum(max_height, heights)
        height = np.minimum(height, max_height)
        # uniform in the closed range [height, max_height]
        span = max_height - height + 1
        height = height + np.where(span > 1, np.floor(rng.random((n, tries)) * span).astype(np.int64), 0)
        width = np.rint(height.astype(f32) * aspect).astype(np.int64)
        area = (width * height).astype(f32)
        grow = area < min_area
        height = np.where(grow, height + 1, height)
        width = np.where(grow, np.rint(height.astype(f32) * aspect).astype(np.int64), width)
        area = (width * height).astype(f32)
        shrink = area > max_area
        height = np.where(shrink, height - 1, height)
        width = np.where(shrink, np.rint(height.astype(f32) * aspect).astype(np.int64), width)
        area = (width * height).astype(f32)
    ok = ((area >= min_area) & (area <= max_area) & (width <= widths) & (height <= heights) & (width > 0)
          & (height > 0))
    # SatisfiesOverlapConstraints with the whole image as the box: the crop (inside the image) covers
    # crop area / image area of it, and a crop of no pixels never passes.
    image_area = (widths * heights).astype(f32)
    ok &= area >= 1.0
    ok &= (area / image_area) >= f32(crop.min_object_covered)
    # offsets uniform in [0, size - crop) (the kernel's Uniform(n) is [0, n); 0 when the crop spans the side)
    y = np.where(height < heights, np.floor(rng.random((n, tries)) * np.maximum(heights - height, 1)), 0)
    x = np.where(width < widths, np.floor(rng.random((n, tries)) * np.maximum(widths - width, 1)), 0)
    first = np.argmax(ok, axis=1)
    found = ok[np.arange(n), first]
    rows = np.arange(n)
    out = np.stack([y[rows, first], x[rows, first], height[rows, first], width[rows, first]], axis=1).astype(np.int64)
    whole = np.stack([np.zeros(n), np.zeros(n), heights[:, 0], widths[:, 0]], axis=1).astype(np.int64)
    return np.where(found[:, None], out, whole)


def resize_taps(positions, in_size, out_size):
    """Bilinear taps of output positions (ints, in the resized image of out_size) into a source side of in_size:
    (lower int64, upper int64, lerp float32), the legacy TF kernel's arithmetic. The sizes may be arrays that
    broadcast against positions (one image per row), each element computed as the kernel computes it."""
    in_size = np.asarray(in_size)
    scale = in_size.astype(np.float32) / np.asarray(out_size).astype(np.float32)
    source = np.asarray(positions).astype(np.float32) * scale
    floor = np.floor(source)
    lower = np.maximum(floor.astype(np.int64), 0)
    upper = np.minimum(np.ceil(source).astype(np.int64), in_size.astype(np.int64) - 1)
    return lower, upper, (source - floor).astype(np.float32)


def eval_geometry(height: int, width: int, size: int, resize_min: int):
    """The centre crop of the closed eval path as taps: (window (y, x, h, w) of the source image the taps read,
    rows (lower, upper, lerp) and cols (lower, upper, lerp) relative to that window)."""
    scale = np.float32(resize_min) / np.float32(min(height, width))
    new_height = int(np.float32(height) * scale)  # truncation, as the reference's _smallest_size_at_least
    new_width = int(np.float32(width) * scale)
    top, left = (new_height - size) // 2, (new_width - size) // 2
    rows = resize_taps(top + np.arange(size), height, new_height)
    cols = resize_taps(left + np.arange(size), width, new_width)
    y0, x0 = int(rows[0][0]), int(cols[0][0])
    y1, x1 = int(rows[1][-1]) + 1, int(cols[1][-1]) + 1
    window = (y0, x0, y1 - y0, x1 - x0)
    return window, (rows[0] - y0, rows[1] - y0, rows[2]), (cols[0] - x0, cols[1] - x0, cols[2])


def train_geometry(windows, flips, size: int):
    """Rows and cols taps [N, size] (relative to each crop window [N, 4]) of the closed training path: the crop
    flipped left-right where flips, then resized to size x size (the flip first, as in
    inputs/image.random_crop_flip_resize)."""
    windows = np.asarray(windows, np.int64)
    h, w = windows[:, 2:3], windows[:, 3:4]
    rows = resize_taps(np.arange(size)[None, :], h, size)
    lower, upper, lerp = resize_taps(np.arange(size)[None, :], w, size)
    flips = np.asarray(flips, bool)[:, None]
    # column c of the flipped crop is column w - 1 - c of the crop
    lower, upper = np.where(flips, w - 1 - lower, lower), np.where(flips, w - 1 - upper, upper)
    return rows, (lower, upper, lerp)


__all__ = ["CropParams", "eval_geometry", "jpeg_size", "resize_taps", "sample_crop_windows", "train_geometry"]
