"""ResNet's GPU input path (inputs/jpeg_batches.GpuDecoder: nvImageCodec region decodes, the CuPy canvas, one
DLPack import) against the host fallback (PIL) through the same jitted resize, on the same draws.

Marked gpu: deselected by default (pytest.ini); run on a machine with an NVIDIA GPU, jax[cuda], nvImageCodec and
CuPy with `python -m pytest -m gpu` (BUILD.md). Needs no TensorFlow."""
from __future__ import annotations

import io
import shutil

import numpy as np
import pytest
from PIL import Image

from mlperf_keras.inputs import image_geometry, imagenet_gpu, jpeg_batches

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA GPU (nvidia-smi not found)")]


@pytest.fixture(scope="module")
def jpegs():
    rng = np.random.default_rng(0)
    out = []
    for i, (h, w) in enumerate(rng.integers(60, 520, (32, 2))):
        y, x = np.mgrid[0:h, 0:w]
        pixels = np.stack([128 + 100 * np.sin(x / 17.0 + i), 128 + 100 * np.cos(y / 23.0),
                           128 + 60 * np.sin((x + y) / 31.0)], -1) + rng.normal(0, 12, (h, w, 3))
        buf = io.BytesIO()
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def _both(jpegs, geometry):
    assert jpeg_batches.gpu_decoder_missing() is None
    gpu = jpeg_batches.resize_from_canvas(jpeg_batches.GpuDecoder().canvas(jpegs, geometry), geometry.taps(),
                                          geometry.valid)
    host = jpeg_batches.resize_from_canvas(jpeg_batches.HostDecoder(4).canvas(jpegs, geometry), geometry.taps(),
                                           geometry.valid)
    assert gpu.dtype == np.uint8 and gpu.shape == host.shape
    return np.asarray(gpu).astype(int), np.asarray(host).astype(int)


def test_gpu_crops_match_host_crops(jpegs):
    """The training windows and flips: nvJPEG against libjpeg-turbo (accurate DCT), after the same resize. Measured
    on an H200 (nvImageCodec 0.9.0, nvJPEG 13.3): max 1 level, mean 0.0004 here; max 2, mean 0.0005 on 256
    re-encoded photos (benchmarks/imagenet_gpu_input.py). Allowed: 3 and 0.01."""
    sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs])
    geometry, _ = imagenet_gpu.train_geometry(sizes, np.random.default_rng(4), 224, image_geometry.CropParams())
    gpu, host = _both(jpegs, geometry)
    diff = np.abs(gpu - host)
    print(f"train crops, GPU vs host: max {diff.max()}, mean {diff.mean():.4f}, >2: {np.mean(diff > 2):.5f}")
    assert diff.max() <= 3 and diff.mean() < 0.01, (diff.max(), diff.mean())


def test_gpu_eval_matches_host_eval(jpegs):
    """The eval centre crops (region decode of what the taps read). Measured on an H200: max 1, mean below 0.001."""
    sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs])
    geometry = imagenet_gpu.eval_geometry(sizes, 224, 256, np.ones(len(jpegs), bool))
    gpu, host = _both(jpegs, geometry)
    diff = np.abs(gpu - host)
    print(f"eval crops, GPU vs host: max {diff.max()}, mean {diff.mean():.4f}")
    assert diff.max() <= 3 and diff.mean() < 0.01, (diff.max(), diff.mean())
