"""Image ops and the image-classification tf.data pipelines of the shared input layer.

Preprocessing follows the MLPerf ResNet reference (mlcommons/training image_classification/tensorflow/official/
resnet/imagenet_preprocessing.py):
- training: sample a crop window from the JPEG header's shape (tf.image.sample_distorted_bounding_box over the whole
  image: area range [0.05, 1], aspect ratio range [0.75, 1.33], at least 10% of the image covered, 100 attempts,
  the whole image when none fits), decode only that window (tf.image.decode_and_crop_jpeg: decode and crop in one
  op), flip left-right with probability 1/2, resize to size x size (bilinear, TF1 corner convention);
- evaluation: decode, resize the shorter side to resize_min (256) keeping the aspect ratio, center-crop size x size;
- normalisation: the reference subtracts the channel means (123.68, 116.78, 103.94) and divides by nothing; here it
  is (x - mean) / std with std 1 by default, applied inside the model (layers.resnet.Normalize) so images cross
  to the accelerator as uint8. The resized image is rounded to uint8 (the reference keeps it float32).

Randomness is stateless: every training image's crop and flip depend on (seed, epoch, worker, position in the
worker's stream) only, so a run is reproducible whatever the number of parallel map calls.
"""
from __future__ import annotations

import tensorflow as tf

from mlperf_keras.inputs import records
from mlperf_keras.inputs.image_geometry import CropParams
from mlperf_keras.inputs.manifest import DataError, check_epoch_fits  # noqa: F401 (re-exported)

# libjpeg's accurate integer DCT (JDCT_ISLOW), the one PIL decodes with. SSD's and Mask R-CNN's references read
# images with PIL (mlcommons/training at 0badcd1786fcb007725ed05f1c44e9d80bbeac52: single_stage_detector/ssd/utils.py
# COCODetection.__getitem__, Image.open(img_path).convert("RGB"); object_detection/pytorch/maskrcnn_benchmark/data/
# datasets/coco.py COCODataset, through torchvision's CocoDetection). tf.image's default ("") is the fast DCT, a few
# levels off; ResNet's reference is TensorFlow with that default, so its pipeline keeps it.
ACCURATE_DCT = "INTEGER_ACCURATE"

IMAGENET_MEAN_RGB = (123.68, 116.78, 103.94)
IMAGENET_STD_RGB = (1.0, 1.0, 1.0)

CLASSIFICATION_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


def to_uint8(image):
    return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)


def resize(image, height, width):
    """Bilinear resize with the reference's convention (TF1 resize_images, align_corners=False); float32 out."""
    return tf.compat.v1.image.resize(image, [height, width], method=tf.image.ResizeMethod.BILINEAR,
                                     align_corners=False)


def sample_crop_window(image_shape, seed, crop: CropParams = CropParams()):
    """The training crop window of an image of shape [height, width, channels] -> int32 [offset_y, offset_x,
    height, width]. seed: int64 [2] (stateless)."""
    begin, box_size, _ = tf.image.stateless_sample_distorted_bounding_box(
        image_shape, bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=seed,
        min_object_covered=crop.min_object_covered, aspect_ratio_range=list(crop.aspect_ratio_range),
        area_range=list(crop.area_range), max_attempts=crop.max_attempts, use_image_if_no_bounding_boxes=True)
    return tf.stack([begin[0], begin[1], box_size[0], box_size[1]])


def random_crop_flip_resize(jpeg, seed, size: int, crop: CropParams = CropParams()):
    """Training preprocessing of one JPEG string -> uint8 [size, size, 3]. seed: int64 [2] (stateless)."""
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, num=2))
    window = sample_crop_window(tf.image.extract_jpeg_shape(jpeg), crop_seed, crop)
    image = tf.image.decode_and_crop_jpeg(jpeg, window, channels=3)
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    image = to_uint8(resize(image, size, size))
    image.set_shape([size, size, 3])
    return image


def center_crop_resize(jpeg, size: int, resize_min: int):
    """Eval preprocessing of one JPEG string -> uint8 [size, size, 3]: shorter side to resize_min, center crop."""
    image = tf.image.decode_jpeg(jpeg, channels=3)
    shape = tf.shape(image)
    height, width = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
    scale = resize_min / tf.minimum(height, width)
    new_height = tf.cast(height * scale, tf.int32)  # truncation, as the reference's _smallest_size_at_least
    new_width = tf.cast(width * scale, tf.int32)
    image = resize(image, new_height, new_width)
    top, left = (new_height - size) // 2, (new_width - size) // 2
    image = to_uint8(tf.slice(image, [top, left, 0], [size, size, -1]))
    image.set_shape([size, size, 3])
    return image


def with_threads(dataset, threads: int | None):
    options = tf.data.Options()
    options.deterministic = True
    if threads:
        options.threading.private_threadpool_size = threads
        options.threading.max_intra_op_parallelism = 1
    return dataset.with_options(options)


def epoch_seed(seed: int, epoch: int) -> int:
    return (int(seed) * 1_000_003 + int(epoch) * 7_919 + 1) % (2**31 - 1)


def train_records(paths: list[str], *, seed: int, epoch: int, num_samples: int, shuffle_buffer: int = 10_000,
                  cycle_length: int = 10) -> tf.data.Dataset:
    """One worker's epoch of serialized training records, num_samples of them: every record of `paths` exactly once,
    in a seeded shuffled order (file order, then a shuffle buffer), then the stream wrapped (read again from the
    start, in a new file order) until num_samples are out. The wrapped part only fills the epoch's last batch(es),
    as torch's DistributedSampler pads its index list with the first indices again."""
    e_seed = epoch_seed(seed, epoch)
    dataset = records.record_dataset(paths, shuffle_seed=e_seed, cycle_length=cycle_length)
    if shuffle_buffer > 1:
        dataset = dataset.shuffle(shuffle_buffer, seed=e_seed, reshuffle_each_iteration=False)
    return dataset.repeat().take(num_samples)


def classification_train_dataset(paths: list[str], *, seed: int, epoch: int, rank: int, batch_size: int,
                                 num_batches: int, image_size: int, crop: CropParams = CropParams(),
                                 shuffle_buffer: int = 10_000, label_offset: int = 0, num_images: int | None = None,
                                 cycle_length: int = 10, threads: int | None = None) -> tf.data.Dataset:
    """Exactly num_batches (uint8 images [B, S, S, 3], int32 labels [B]) of one worker for one epoch.

    Every record of the worker's files (already split by worker) comes once per epoch in an order shuffled per
    (seed, epoch), and the epoch's remaining samples wrap around (train_records); each image gets its own stateless
    seed. num_images: how many records `paths` hold (records.worker_rows), checked to fit in the epoch (DataError
    rather than leaving images out). label_offset shifts labels (1 for a 1001-way head whose class 0 is the
    reference's background).
    """
    if num_images is not None:
        check_epoch_fits(num_images, batch_size, num_batches)
    e_seed = epoch_seed(seed, epoch)
    dataset = train_records(paths, seed=seed, epoch=epoch, num_samples=num_batches * batch_size,
                            shuffle_buffer=shuffle_buffer, cycle_length=cycle_length).enumerate()
    stream = tf.constant(int(rank) << 40, tf.int64)

    def preprocess(index, serialized):
        example = records.parse(serialized, CLASSIFICATION_FEATURES)
        element_seed = tf.stack([tf.constant(e_seed, tf.int64), stream + index])
        image = random_crop_flip_resize(example["image/encoded"], element_seed, image_size, crop)
        return image, tf.cast(example["image/class/label"] + label_offset, tf.int32)

    dataset = dataset.map(preprocess, num_parallel_calls=records.AUTOTUNE, deterministic=True)
    dataset = dataset.batch(batch_size, drop_remainder=True).prefetch(records.AUTOTUNE)
    return with_threads(dataset, threads)


def classification_eval_dataset(paths: list[str], *, batch_size: int, image_size: int, resize_min: int,
                                label_offset: int = 0, cycle_length: int = 10,
                                threads: int | None = None) -> tf.data.Dataset:
    """Every record of `paths` once, in full batches: the last batch is padded with zero images labelled -1."""

    def preprocess(serialized):
        example = records.parse(serialized, CLASSIFICATION_FEATURES)
        image = center_crop_resize(example["image/encoded"], image_size, resize_min)
        return image, tf.cast(example["image/class/label"] + label_offset, tf.int32)

    def pad(images, labels):
        missing = batch_size - tf.shape(labels)[0]
        images = tf.pad(images, [[0, missing], [0, 0], [0, 0], [0, 0]])
        labels = tf.pad(labels, [[0, missing]], constant_values=-1)
        return tf.ensure_shape(images, [batch_size, image_size, image_size, 3]), tf.ensure_shape(labels, [batch_size])

    dataset = records.record_dataset(paths, cycle_length=cycle_length)
    dataset = dataset.map(preprocess, num_parallel_calls=records.AUTOTUNE, deterministic=True)
    dataset = dataset.batch(batch_size).map(pad).prefetch(records.AUTOTUNE)
    return with_threads(dataset, threads)


__all__ = ["CLASSIFICATION_FEATURES", "CropParams", "IMAGENET_MEAN_RGB", "IMAGENET_STD_RGB", "center_crop_resize",
           "check_epoch_fits", "classification_eval_dataset", "classification_train_dataset", "epoch_seed",
           "random_crop_flip_resize", "resize", "sample_crop_window", "to_uint8", "train_records"]
