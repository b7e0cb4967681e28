"""The GPU input paths of ResNet, SSD and Mask R-CNN (inputs/jpeg_batches.GpuDecoder: nvImageCodec region decodes,
the CuPy canvas, one DLPack import) against the host fallback (PIL) through the same jitted functions, on the same
draws.

Marked gpu: deselected by default (pytest.ini); run on a machine with an NVIDIA GPU, jax[cuda], nvImageCodec and
CuPy with `python -m pytest -m gpu` (BUILD.md). Needs no TensorFlow."""
from __future__ import annotations

import io
import shutil

import numpy as np
import pytest
from PIL import Image

from mlperf_keras.inputs import image_geometry, imagenet_gpu, jpeg_batches
from tests.conftest import photo_jpeg

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


def test_gpu_decoder_reusing_images_decodes_the_same_pixels(jpegs):
    """GpuDecoder reuses the previous batch's output images (nvImageCodec decode(images=)): a batch decoded after
    another batch of other window sizes, into that batch's images, equals the same batch decoded first."""
    sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs])
    first, _ = imagenet_gpu.train_geometry(sizes, np.random.default_rng(7), 224, image_geometry.CropParams())
    other, _ = imagenet_gpu.train_geometry(sizes, np.random.default_rng(8), 224, image_geometry.CropParams())
    decoder = jpeg_batches.GpuDecoder()
    fresh = np.asarray(decoder.canvas(jpegs, first))[:first.needed]
    decoder.canvas(jpegs, other)   # windows of other sizes: the reused buffers are resized
    again = np.asarray(decoder.canvas(jpegs, first))[:first.needed]
    assert np.array_equal(fresh, again)


def test_ssd_gpu_batch_matches_host_batch():
    """SSD's JAX path (inputs/ssd_jax): the same TrainPlan (crop windows, flips, jitter draws) decoded by nvJPEG and
    by PIL, through the same jitted resize, colour jitter and box matching: the targets equal, pixels within the
    decoders' difference (jitter can stretch it: contrast and saturation scale differences up to 1.5x). Allowed: 4
    levels, mean 0.02."""
    from mlperf_keras.inputs import ssd_jax, ssd_jax_augment

    rng = np.random.default_rng(5)
    examples = []
    for i in range(16):
        h, w = (int(v) for v in rng.integers(240, 640, 2))
        lt = rng.random((3, 2)) * 0.6
        boxes = np.concatenate([lt, lt + 0.1 + rng.random((3, 2)) * 0.3], 1).clip(0, 1).astype(np.float32)
        examples.append({"jpeg": photo_jpeg(h, w, 100 + i), "boxes": boxes[:, [0, 1, 2, 3]],
                         "labels": rng.integers(1, 81, 3).astype(np.int32), "is_crowd": np.zeros(3, bool),
                         "image_id": i, "height": h, "width": w})
    plan = ssd_jax.TrainPlan(examples, np.random.default_rng(6), size=300, max_samples=1)
    out = []
    for decoder in (jpeg_batches.GpuDecoder(), jpeg_batches.HostDecoder(4)):
        canvas = decoder.canvas(plan.jpegs, plan.geometry)
        out.append(ssd_jax_augment.train_images_and_targets(canvas, plan.geometry.taps(), plan.factors, plan.order, plan.gt,
                                                    plan.gt_labels, plan.gt_valid))
    (gpu_images, gpu_targets), (host_images, host_targets) = out
    for a, b in zip(gpu_targets, host_targets):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    diff = np.abs(np.asarray(gpu_images).astype(int) - np.asarray(host_images).astype(int))
    print(f"SSD train batch, GPU vs host: max {diff.max()}, mean {diff.mean():.4f}")
    assert diff.max() <= 4 and diff.mean() < 0.02, (diff.max(), diff.mean())


def test_maskrcnn_gpu_images_match_host_images():
    """Mask R-CNN's JAX path (inputs/maskrcnn_jax): whole images of COCO's sizes decoded by nvJPEG and by PIL, then
    the same jitted resize to 800/1333, flip and padding. Allowed: 3 levels, mean 0.01 (as ResNet's crops)."""
    from mlperf_keras.inputs import maskrcnn_jax

    jpegs, sizes = [], []
    for i in range(4):
        h, w = (480, 640) if i % 2 else (427, 640)
        jpegs.append(photo_jpeg(h, w, 200 + i))
        sizes.append(maskrcnn_jax.resized_size(h, w))
    geometry = maskrcnn_jax.ImageGeometry(jpegs, sizes, [False, True, True, False], (800, 1344))
    gpu = maskrcnn_jax.resize_and_pad(jpeg_batches.GpuDecoder().canvas(jpegs, geometry), geometry.taps())
    host = maskrcnn_jax.resize_and_pad(jpeg_batches.HostDecoder(4).canvas(jpegs, geometry), geometry.taps())
    assert gpu.dtype == np.uint8 and gpu.shape == host.shape == (4, 800, 1344, 3)
    diff = np.abs(np.asarray(gpu).astype(int) - np.asarray(host).astype(int))
    print(f"Mask R-CNN images, GPU vs host: max {diff.max()}, mean {diff.mean():.4f}")
    assert diff.max() <= 3 and diff.mean() < 0.01, (diff.max(), diff.mean())


HARDWARE_CROPS = '''
import numpy as np
from mlperf_keras.inputs import image_geometry, imagenet_gpu, jpeg_batches
from tests.conftest import photo_jpeg
jpegs = [photo_jpeg(int(h), int(w), 300 + i)
         for i, (h, w) in enumerate(np.random.default_rng(7).integers(240, 640, (32, 2)))]
sizes = np.array([image_geometry.jpeg_size(j) for j in jpegs])
geometry, _ = imagenet_gpu.train_geometry(sizes, np.random.default_rng(4), 224, image_geometry.CropParams())
decoder = jpeg_batches.make_decoder("gpu_hardware")
assert decoder.name == "gpu_hardware", decoder.name
gpu = jpeg_batches.resize_from_canvas(decoder.canvas(jpegs, geometry), geometry.taps(), geometry.valid)
host = jpeg_batches.resize_from_canvas(jpeg_batches.HostDecoder(4).canvas(jpegs, geometry), geometry.taps(),
                                       geometry.valid)
diff = np.abs(np.asarray(gpu).astype(int) - np.asarray(host).astype(int))
print(f"train crops, GPU hardware decoder vs host: max {diff.max()}, mean {diff.mean():.4f}")
assert diff.max() <= 3 and diff.mean() < 0.01, (diff.max(), diff.mean())
'''


def test_gpu_hardware_decoder_crops_match_host_crops():
    """input_pipeline=gpu_hardware (nvImageCodec's HW_GPU_ONLY backend) on ResNet's training windows, within the
    bounds of the default backend's test; in its own process (one nvImageCodec decoder a process). Measured on an
    H100 (nvImageCodec 0.9.0, nvJPEG 13.3): max 2 levels, mean 0.0002. Skipped on GPUs without JPEG engines
    (nvImageCodec then decodes nothing)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", HARDWARE_CROPS], cwd=root, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0 and "hardware JPEG decoder" in proc.stderr and "T4 and V100" in proc.stderr:
        pytest.skip("this GPU has no hardware JPEG decoder")
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)


def test_decode_workers_batches_match_batches_decoded_here(tmp_path):
    """hparam decode_workers: ResNet's training batches read, planned and decoded in two GPU worker processes
    (inputs/decode_process, each canvas passed through CUDA IPC) against the same epochs decoded in this process:
    the same labels in the same order and the same pixels within the decoders' tolerance (nvImageCodec may split a
    batch between its hardware and CUDA decoders differently from call to call); two epochs, so the second reuses
    the workers' canvases."""
    from benchmarks.imagenet_gpu_input import _example, write_records

    sizes = np.random.default_rng(9).integers(200, 520, (48, 2))
    jpegs = [photo_jpeg(int(h), int(w), 400 + i) for i, (h, w) in enumerate(sizes)]
    paths = [str(tmp_path / f"train-{i:05d}-of-00002") for i in range(2)]
    write_records(paths, [_example(j, i % 10) for i, j in enumerate(jpegs)])
    decoder = jpeg_batches.GpuDecoder()
    for epoch in (0, 1):
        kw = dict(seed=1, epoch=epoch, rank=0, batch_size=8, num_batches=6, image_size=224, shuffle_buffer=64)
        here = [(np.asarray(x).astype(int), np.asarray(y)) for x, y in imagenet_gpu.train_batches(paths, decoder, **kw)]
        there = [(np.asarray(x).astype(int), np.asarray(y))
                 for x, y in imagenet_gpu.train_batches(paths, decoder, decode_workers=2, **kw)]
        assert len(here) == len(there) == 6
        for (a, labels_a), (b, labels_b) in zip(here, there):
            np.testing.assert_array_equal(labels_a, labels_b)
            diff = np.abs(a - b)
            assert a.shape == b.shape == (8, 224, 224, 3) and diff.max() <= 3 and diff.mean() < 0.01, (
                diff.max(), diff.mean())
