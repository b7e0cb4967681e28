"""Mask R-CNN (ResNet-50-FPN) on COCO 2017: box AND mask mAP@[.5:.95] over val2017 after every epoch (MLPerf object
detection, heavyweight).

As the MLPerf reference (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52, object_detection/pytorch, a
maskrcnn-benchmark fork; config configs/e2e_mask_rcnn_R_50_FPN_1x.yaml over maskrcnn_benchmark/config/defaults.py;
paths below are under maskrcnn_benchmark/):
- model: layers.maskrcnn (MSRA ResNet-50 with frozen stem, res2 and batch norms, FPN P2-P6, RPN, ROIAlign box and
  mask heads; its docstring cites each piece); the backbone starts from Detectron's ImageNet-trained R-50
  (MODEL.WEIGHT catalog://ImageNetPretrained/MSRA/R-50) when --backbone_weights is given (python -m
  data_prep.maskrcnn_backbone converts it), else from random weights;
- input: inputs.maskrcnn (short side 800, long side <= 1333, flip p 0.5, aspect-ratio grouping; the training set is
  the 117,266 images with a usable annotation, the eval set all 5,000 val2017 images); on JAX without TensorFlow,
  or when hparam input_pipeline asks, inputs.maskrcnn_jax's batches of the same structure (JPEGs decoded on the GPU
  or the host, the resize on the device);
- optimisation (solver/build.py make_optimizer, solver/lr_scheduler.py, engine/trainer.py): torch.optim.SGD with
  momentum 0.9 (optimizers.MomentumSGD, the same update), weight decay 1e-4 on weights and 0 on biases
  (WEIGHT_DECAY_BIAS), biases at 2x the learning rate (BIAS_LR_FACTOR); base LR 0.02 per 16 images
  (SOLVER.BASE_LR at IMS_PER_BATCH 16, scaled linearly: the rules' 0.02 x K); WarmupMultiStepLR with linear warmup
  from 1/3 over 500 iterations (WARMUP_FACTOR, WARMUP_ITERS) and x0.1 at iterations (60,000, 80,000) x 16 / global
  batch (SOLVER.STEPS; the MLPerf scaling); at most 90,000 x 16 / batch iterations (SOLVER.MAX_ITER 90000 in
  configs/e2e_mask_rcnn_R_50_FPN_1x.yaml): the reference does not evaluate at MAX_ITER, so its last evaluation is
  the 12th at batch 16 (iteration 87,960), and --max_epochs defaults to that count (max_epochs), one more refused
  in the closed division; the closed division refuses a global batch whose scaled LR the official checker fails
  (compliance/closed_rules.py refuse_failing_batch);
- evaluation every epoch_size // batch + 1 iterations (data/build.py make_data_loader's iterations_per_epoch,
  tools/train_mlperf.py mlperf_test_early_exit: 7,330 at batch 16), the training batches one stream of passes over
  the data as IterationBasedBatchSampler serves them (inputs.maskrcnn.stream_position); 1000 proposals per image
  (num_image_candidates), score 0.05, per-class NMS 0.5, 100 detections, masks pasted at the original image size
  and thresholded at 0.5,
  COCO "bbox" and "segm" AP (metrics.coco_instances.CocoInstanceMetric) of every val image, gathered from every
  worker and scored once; detections are scaled back to the original image (BoxList.resize) and written as
  [x, y, x2 - x + 1, y2 - y + 1] (convert("xywh")), as data/datasets/evaluation/coco/coco_eval.py does; here
  a pool of processes per worker pastes the masks beside the predictions (metrics.coco_instances.PastePool);
- target: box mAP >= 0.377 AND mask mAP >= 0.339; MLLOG eval_accuracy {"BBOX": .., "SEGM": ..}.

Differences from the reference, on purpose:
- Static shapes: images padded to one shape per orientation, ground truth to max_gt objects, proposals to a fixed
  count, each object's polygons to max_vertices edges (inputs.maskrcnn, layers.maskrcnn and layers.maskrcnn_targets
  say how each one is still the reference's computation, and where the mask targets' rasteriser differs).
- A pass over the data (inputs.maskrcnn): each orientation group's last batch is filled with its own images
  again, where the reference's GroupedBatchSampler ends it with a smaller batch.
- The data: train2017 and val2017 (instances_*2017.json). The reference's config reads the same images from the
  2014 split files, DATASETS.TRAIN ("coco_2014_train", "coco_2014_valminusminival") and TEST
  ("coco_2014_minival",) (configs/e2e_mask_rcnn_R_50_FPN_1x.yaml, config/paths_catalog.py); its README (object_
  detection/pytorch/README.md) gives the equivalence: "COCO_2017_train = COCO_2014_train + valminusminival,
  COCO_2017_val = minival".
- The reference's FPN_POST_NMS_TOP_N_TRAIN 2000 counts proposals per batch of a GPU (2 images at its 8 x 2): here
  1000 per image, which is what MLPerf logs as num_image_candidates.
- (Not a difference: every batch norm is a fixed affine, so loop.py's averaging of batch-norm statistics before an
  evaluation has nothing to average.)

One file over 400 lines on purpose: the reference notes above and the Workload class that implements them belong
together; the model, targets, losses and box operations already live in layers/.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from mlperf_keras.compliance import closed_rules
from mlperf_keras.config import ConfigError
from mlperf_keras.inputs.maskrcnn_shapes import LANDSCAPE, MAX_VERTICES, PORTRAIT, padded_shape
from mlperf_keras.interfaces import Evaluator, RepeatedBatch, SyntheticForwardEvaluator, TrainData
from mlperf_keras.layers import backbone_weights
from mlperf_keras.workloads.base import Workload, per_worker_eval_batch

# COCO 2017's counts (the reference's 2014 train + valminusminival / minival files hold the same images), for
# --dry_run and --synthetic: 117,266 training images with a usable annotation, 5,000 val images.
COCO2017 = {"train_images": 117_266, "val_images": 5_000, "num_classes": 81}
BASE_LEARNING_RATE = 0.02           # per 16 images (SOLVER.BASE_LR at SOLVER.IMS_PER_BATCH 16)
REFERENCE_BATCH = 16


def iterations_per_epoch(images: int, global_batch: int) -> int:
    """The reference's iters_per_epoch, epoch_size // images_per_batch + 1 (data/build.py make_data_loader at
    0badcd17): tools/train_mlperf.py evaluates after every that many iterations (mlperf_test_early_exit)."""
    return images // global_batch + 1


def max_iterations(hp: dict, global_batch: int) -> int:
    """SOLVER.MAX_ITER (90,000 at 16 images, configs/e2e_mask_rcnn_R_50_FPN_1x.yaml at 0badcd17) scaled to the
    global batch as the decay steps are."""
    return hp["max_iterations"] * REFERENCE_BATCH // global_batch


def max_epochs(hp: dict, global_batch: int) -> int:
    """Epochs (evaluations) within max_iterations: the reference's data loader stops at MAX_ITER, so a run here never
    evaluates a model the reference could not have reached (at batch 16: 90,000 // 7,330 = 12)."""
    return max(1, max_iterations(hp, global_batch) // iterations_per_epoch(hp["train_images"], global_batch))


def base_learning_rate(hp: dict, global_batch: int) -> float:
    """opt_base_learning_rate: the reference's LR per 16 images, scaled linearly to the global batch."""
    return hp["learning_rate"] * global_batch / REFERENCE_BATCH


def spec_of(hp: dict):
    """The layers.maskrcnn.Spec that the hyperparameters describe."""
    from mlperf_keras.layers import maskrcnn

    fields = {f.name for f in dataclasses.fields(maskrcnn.Spec)}
    return maskrcnn.Spec(**{k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in hp.items()
                            if k in fields})


def is_bias(variable) -> bool:
    """The reference's `"bias" in key` of named_parameters: the convolution and dense biases."""
    return variable.name == "bias" or variable.path.endswith("/bias")


class MaskRCNN(Workload):
    name = "maskrcnn"
    metric_name = "box/mask mAP"
    dataset_name = "coco-2017"
    prepare_command = "python -m data_prep.coco --raw_dir=RAW --output_dir=DATA"
    throughput_unit = "images"
    train_flops_per_sample = 1.5e12   # estimate at 800x1333 (MLPERF.md: 1.2-1.7 TFLOP per training image)
    uses_backbone_weights = True
    # Seed 1 reached box 0.35 / mask 0.41 after 10 epochs, seed 2 box 0.32 / mask 0.41 after 12 (README, Demo).
    demo_target = {"bbox": 0.3, "segm": 0.3}
    # A 1-1-1-1 ResNet of width 8 with 32-channel FPN and heads (a shared 2-core CPU trains it at about a second per
    # step of 4 images of 160 x 256; with the reference's 256 channels: 8 s), 160-pixel images, the reference's LR
    # per 16 images. Its batch norms train: from random weights the fixed affines (identity at initialisation) leave
    # the activations unnormalised, and the classifier loss spiked at this LR and diverged at 4x it.
    demo_hparams = {"block_sizes": (1, 1, 1, 1), "width": 8, "fpn_channels": 32, "representation_size": 128,
                    "mask_conv_layers": (32, 32, 32, 32), "frozen_batch_norm": False, "frozen_stages": 0,
                    "pre_nms_train": 64, "pre_nms_test": 64,
                    "proposals_per_image": 64, "roi_batch": 32, "max_gt": 8, "detections_per_image": 20,
                    "min_size": 160, "max_size": 256, "batch_size": 4, "learning_rate": BASE_LEARNING_RATE,
                    "warmup_steps": 50, "decay_steps": (128, 150), "max_iterations": 160, "shuffle_buffer": 256}
    # TensorFlow's XLA did not finish compiling even the tiny detector within 10 minutes on a 2-core CPU
    # (tests/test_maskrcnn_losses.py); the demo runs its steps as plain tf.functions.
    demo_jit_compile = False

    def reference_hparams(self, ruleset: str) -> dict:
        from mlperf_keras.layers import maskrcnn

        spec = maskrcnn.Spec()
        return {
            "num_classes": COCO2017["num_classes"],
            "block_sizes": spec.block_sizes, "width": spec.width, "fpn_channels": spec.fpn_channels,
            "representation_size": spec.representation_size, "mask_conv_layers": spec.mask_conv_layers,
            "frozen_batch_norm": spec.frozen_batch_norm, "frozen_stages": spec.frozen_stages,
            "pre_nms_train": spec.pre_nms_train, "pre_nms_test": spec.pre_nms_test,
            "proposals_per_image": spec.proposals_per_image,    # num_image_candidates
            "roi_batch": spec.roi_batch, "max_gt": spec.max_gt, "detections_per_image": spec.detections_per_image,
            # polygon edges per object (padding, not a hyperparameter): prepared data gives its own maximum
            "max_vertices": MAX_VERTICES,
            "batch_size": REFERENCE_BATCH,      # global, when neither --batch_size nor a preset gives one
            "eval_batch_size": 0,               # per worker; 0: the per-worker training batch
            # processes per worker that paste and encode the eval masks (metrics.coco_instances.PastePool); 0: the
            # host's cores shared among its workers, at most 8; 1: in the worker itself
            "paste_processes": 0,
            "learning_rate": BASE_LEARNING_RATE,   # per 16 images
            "momentum": 0.9,
            "weight_decay": 1e-4,
            "weight_decay_bias": 0.0,
            "bias_lr_factor": 2.0,
            "warmup_steps": 500,                # iterations, whatever the batch (WARMUP_ITERS)
            "warmup_factor": 1.0 / 3,
            "decay_steps": (60_000, 80_000),    # iterations at batch 16, scaled by 16 / global batch
            "decay_factor": 0.1,
            "max_iterations": 90_000,           # at batch 16 (MAX_ITER): sets the default --max_epochs
            "min_size": 800,
            "max_size": 1333,
            "shuffle_buffer": 1024,             # records, per worker
            # auto: tf.data on TensorFlow; on JAX with a GPU, whole JPEGs decoded on it and resized there
            # (inputs/maskrcnn_jax; host decoding where nvImageCodec or CuPy is missing); on JAX without one,
            # tf.data (or host decoding without TensorFlow). tf.data, gpu, gpu_hardware
            # (the GPU's JPEG engines only) or host force one.
            "input_pipeline": "auto",
            **{k: v for k, v in COCO2017.items() if k != "num_classes"},
        }

    def dataset_hparams(self, manifest):
        if manifest is None:
            return {}
        counts = manifest["counts"]
        return {"num_classes": counts["num_classes"] + 1, "train_images": counts["train_images_annotated"],
                "val_images": counts["val_images"],
                "max_vertices": max(32, -(-int(counts["max_object_vertices"]) // 32) * 32)}

    def default_epochs(self, hparams: dict, global_batch: int) -> int:
        """The evaluations the reference makes before MAX_ITER ends it (it does not evaluate at MAX_ITER itself):
        12 at batch 16, the last at iteration 87,960 (max_epochs)."""
        return max_epochs(hparams, global_batch)

    def default_global_batch(self, hparams, num_workers, per_worker_preset):
        return per_worker_preset * num_workers if per_worker_preset else hparams["batch_size"]

    def describe(self, config):
        model = self.build_model(config)
        total = model.count_params()
        trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
        frozen_affine = sum(int(np.prod(v.shape)) for v in model.non_trainable_variables
                            if v.path.endswith(("/scale", "/bias")))   # layers.resnet.FrozenAffine
        spec = spec_of(config.hparams)
        return [f"weights: {total} = {total - frozen_affine} convolution/dense weights and biases (torchvision's "
                f"maskrcnn_resnet50_fpn counts 44,347,573 at 81 classes) + {frozen_affine} frozen batch-norm "
                f"affines (buffers in the reference); trainable: {trainable} (the stem and res2 are frozen)",
                f"proposals per image: {spec.proposals_per_image} (num_image_candidates); images padded to "
                f"{padded_shape(LANDSCAPE, config.hparams['min_size'], config.hparams['max_size'])} landscape, "
                f"{padded_shape(PORTRAIT, config.hparams['min_size'], config.hparams['max_size'])} portrait"]

    # ---- model, optimizer, loss ----

    def check(self, config, manifest):
        from mlperf_keras.inputs import jpeg_batches

        hp = config.hparams
        jpeg_batches.check_pipeline(hp["input_pipeline"], config.backend)   # refuses a bad value at start
        if not 0 < hp["warmup_factor"] <= 1:
            raise ConfigError(f"warmup_factor={hp['warmup_factor']}: in (0, 1] (the reference's 1/3; the checker "
                              f"demands > 0)")
        if hp["warmup_steps"] < 0:
            raise ConfigError(f"warmup_steps={hp['warmup_steps']}: at least 0")
        steps = list(hp["decay_steps"])
        if len(steps) != 2 or steps != sorted(steps) or steps[0] <= 0:
            raise ConfigError(f"decay_steps={hp['decay_steps']}: two increasing iterations at batch 16 (the "
                              f"reference's 60000-80000; the checker demands two)")
        if not 0 < hp["min_size"] <= hp["max_size"]:
            raise ConfigError(f"min_size={hp['min_size']}, max_size={hp['max_size']}: 0 < min_size <= max_size")
        if hp["proposals_per_image"] < 1 or hp["roi_batch"] < 1 or hp["max_gt"] < 1 or hp["max_vertices"] < 3:
            raise ConfigError("proposals_per_image, roi_batch and max_gt must be positive, max_vertices at least 3")
        if hp["paste_processes"] < 0:
            raise ConfigError(f"paste_processes={hp['paste_processes']}: 0 (as many as the host's cores allow), "
                              f"1 (paste the eval masks in the worker itself) or more processes")
        if config.closed_division:
            # opt_base_learning_rate scales linearly with the global batch; the closed checker accepts few of them.
            closed_rules.refuse_failing_batch(
                config, self.name, "opt_base_learning_rate", lambda batch: base_learning_rate(hp, batch),
                lambda batch: f"{hp['learning_rate']:g} x {batch} / {REFERENCE_BATCH}")
            cap = max_epochs(hp, config.global_batch_size)
            if config.max_epochs > cap:
                raise ConfigError(
                    f"--max_epochs={config.max_epochs}: the reference stops at MAX_ITER "
                    f"{max_iterations(hp, config.global_batch_size)} iterations at global batch "
                    f"{config.global_batch_size} ({hp['max_iterations']} x {REFERENCE_BATCH} / batch), so a closed "
                    f"run evaluates at most {cap} times ({self.steps_per_epoch(config, manifest)} iterations each); "
                    f"pass --max_epochs={cap} or less, or --division=open")
        if manifest is not None and not config.demo and config.backbone_weights is None:
            raise ConfigError("--model=maskrcnn on real data needs --backbone_weights: the reference starts from "
                              "Detectron's ImageNet-trained R-50 (convert R-50.pkl with python -m "
                              "data_prep.maskrcnn_backbone); --backbone_weights=none trains from random weights")

    def build_model(self, config):
        from mlperf_keras.layers import maskrcnn

        model = maskrcnn.MaskRCNN(spec_of(config.hparams), seed=config.seed)
        model.built = True   # its three parts are functional models, built already
        if config.backbone_weights not in (None, "none"):
            maskrcnn.load_backbone_weights(model, config.backbone_weights)
        return model

    def _schedule(self, config) -> dict:
        """The learning-rate schedule's numbers: what build_optimizer uses and mllog_hparams logs."""
        hp = config.hparams
        batch = config.global_batch_size
        return {"base": base_learning_rate(hp, batch), "warmup_steps": int(hp["warmup_steps"]),
                "warmup_factor": float(hp["warmup_factor"]),
                "milestones": [int(s) * REFERENCE_BATCH // batch for s in hp["decay_steps"]],
                "gamma": float(hp["decay_factor"])}

    def build_optimizer(self, config, steps_per_epoch):
        from mlperf_keras import optimizers

        hp = config.hparams
        s = self._schedule(config)
        schedule = optimizers.WarmupMultiStepLR(s["base"], s["warmup_steps"], s["warmup_factor"], s["milestones"],
                                                s["gamma"])
        if hp["weight_decay_bias"] not in (0, hp["weight_decay"]):
            raise ConfigError("weight_decay_bias: 0 (the reference's) or the weight decay itself")
        decay_biases = hp["weight_decay_bias"] == hp["weight_decay"]
        return optimizers.MomentumSGD(schedule, momentum=hp["momentum"], weight_decay=hp["weight_decay"],
                                      decay=lambda v: decay_biases or not is_bias(v),
                                      lr_multiplier=lambda v: hp["bias_lr_factor"] if is_bias(v) else 1.0)

    def loss(self, y_true, y_pred):
        from mlperf_keras.layers import maskrcnn_targets

        return maskrcnn_targets.total_loss(y_true, y_pred)

    # ---- data ----

    def steps_per_epoch(self, config, manifest):
        images = manifest["counts"]["train_images_annotated"] if manifest else config.hparams["train_images"]
        return iterations_per_epoch(images, config.global_batch_size)

    def train_data(self, config, dist, manifest):
        from mlperf_keras.inputs.manifest import worker_files

        paths = worker_files(config.data_dir, manifest, "train", dist.rank, dist.world_size)
        return _CocoTrainData(config, dist, paths, self.steps_per_epoch(config, manifest))

    def synthetic_train_data(self, config, dist):
        return RepeatedBatch(synthetic_batch(config.hparams, config.per_worker_batch_size, config.seed + dist.rank),
                             self.steps_per_epoch(config, None), samples_per_epoch=config.hparams["train_images"])

    def batch_shapes(self, config, dist, manifest):
        """Both orientation groups' padded shapes (COCO has both; which this worker's shards hold is known only by
        reading them)."""
        return [synthetic_batch(config.hparams, config.per_worker_batch_size, config.seed + dist.rank, group)
                for group in (LANDSCAPE, PORTRAIT)]

    def evaluator(self, config, dist, manifest):
        batch = per_worker_eval_batch(config)
        if manifest is None:
            inputs, _ = synthetic_batch(config.hparams, batch, config.seed + 7)
            return SyntheticForwardEvaluator({"images": inputs["images"], "image_sizes": inputs["image_sizes"]}, batch,
                                             config.hparams["val_images"], dist, parts=("bbox", "segm"))
        from mlperf_keras.inputs.manifest import split_shards, worker_files

        paths = worker_files(config.data_dir, manifest, "validation", dist.rank, dist.world_size)
        annotations = os.path.join(config.data_dir, split_shards(manifest, "annotations")[0]["name"])
        return _CocoEvaluator(config, dist, paths, annotations,
                              manifest["categories"], manifest["counts"]["val_images"], batch)

    # ---- MLLOG ----

    def mllog_hparams(self, config):
        hp = config.hparams
        s = self._schedule(config)
        return {"opt_base_learning_rate": s["base"], "opt_weight_decay": hp["weight_decay"],
                "opt_learning_rate_warmup_steps": s["warmup_steps"],
                "opt_learning_rate_warmup_factor": s["warmup_factor"],
                "opt_learning_rate_decay_factor": s["gamma"], "opt_learning_rate_decay_steps": s["milestones"],
                "num_image_candidates": hp["proposals_per_image"], "min_image_size": hp["min_size"],
                "max_image_size": hp["max_size"],
                "backbone_weights": backbone_weights.weights_id(config.backbone_weights)}

    def mllog_accuracy(self, metric, config):
        return {"BBOX": metric["bbox"], "SEGM": metric["segm"]}

    # ---- demo ----


def image_detections(outputs: dict, index: int, image_id: int, image_size, height: int, width: int,
                     label_to_category: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image's detections (MaskRCNN's inference outputs, batch row `index`) -> COCO rows [K, 7] in original-image
    pixels, their K masks (K, 28, 28) of probabilities and K boxes (x1, y1, x2, y2) in original-image pixels: boxes
    scaled by (width / resized width, height / resized height) as BoxList.resize, rows [x1, y1, x2 - x1 + 1,
    y2 - y1 + 1] as convert("xywh")."""
    valid = np.asarray(outputs["valid"][index], bool)
    boxes = np.asarray(outputs["boxes"][index], np.float64)[valid]
    scores = np.asarray(outputs["scores"][index], np.float64)[valid]
    labels = np.asarray(outputs["labels"][index], np.int64)[valid]
    masks = np.asarray(outputs["masks"][index], np.float32)[valid]
    if len(labels) and (labels.max() >= len(label_to_category) or (label_to_category[labels] < 0).any()):
        raise ValueError(f"detections of labels {sorted(set(labels.tolist()))} that the categories do not map")
    resized_h, resized_w = (float(v) for v in image_size)
    boxes = boxes * np.array([width / resized_w, height / resized_h] * 2)
    rows = np.stack([np.full(len(scores), float(image_id)), boxes[:, 0], boxes[:, 1],
                     boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1, scores,
                     label_to_category[labels].astype(np.float64)], axis=1) if len(scores) else np.zeros((0, 7))
    return rows, masks, boxes


def instance_results(outputs: dict, index: int, image_id: int, image_size, height: int, width: int,
                     label_to_category: np.ndarray) -> tuple[np.ndarray, list]:
    """image_detections' rows and their K RLE masks pasted at the original image size
    (metrics.coco_instances.encode_pasted_mask), in this process."""
    from mlperf_keras.metrics import coco_instances

    rows, masks, boxes = image_detections(outputs, index, image_id, image_size, height, width, label_to_category)
    return rows, coco_instances.encode_image_masks(masks, boxes, int(height), int(width))


class _CocoTrainData(TrainData):
    """One worker's batches as the reference's IterationBasedBatchSampler serves them: passes over the data (each
    trainable image once, grouped by orientation) back to back, cut into epochs of steps_per_epoch iterations; a
    pass and an epoch need not end together (inputs.maskrcnn_shapes.stream_position). tf.data (inputs.maskrcnn) or
    the JAX pipeline (inputs.maskrcnn_jax), as input_pipeline picks."""

    def __init__(self, config, dist, paths, steps):
        from mlperf_keras.inputs import jpeg_batches, maskrcnn_shapes

        self.config, self.rank, self.paths, self.steps_per_epoch = config, dist.rank, paths, steps
        self.pipeline = jpeg_batches.choose_pipeline(config.hparams["input_pipeline"])
        # This worker's trainable images per orientation, counted once (one read of its files).
        if self.pipeline == "tf.data":
            from mlperf_keras.inputs.maskrcnn import count_groups
        else:
            from mlperf_keras.inputs.maskrcnn_jax import count_groups
        self.groups = count_groups(paths)
        maskrcnn_shapes.check_pass_fits(self.groups, config.per_worker_batch_size, steps, paths)
        self.pass_batches = maskrcnn_shapes.grouped_batches_needed(self.groups, config.per_worker_batch_size)
        self.samples_per_epoch = int(dist.sum_across_workers([float(sum(self.groups))])[0])
        self._stream, self._next_epoch = None, None

    def batches(self, epoch):
        import itertools

        if self._stream is None or epoch != self._next_epoch:   # the first epoch, or a resumed run's
            self._stream = self._passes(epoch * self.steps_per_epoch)
        self._next_epoch = epoch + 1
        return itertools.islice(self._stream, self.steps_per_epoch)

    def _passes(self, first_batch: int):
        from mlperf_keras.inputs import maskrcnn_shapes

        hp = self.config.hparams
        options = dict(seed=self.config.seed, rank=self.rank, batch_size=self.config.per_worker_batch_size,
                       num_batches=self.pass_batches, shuffle_buffer=hp["shuffle_buffer"], min_size=hp["min_size"],
                       max_size=hp["max_size"], max_gt=hp["max_gt"], max_vertices=hp["max_vertices"])
        data_pass, skip = maskrcnn_shapes.stream_position(first_batch, self.pass_batches)
        while True:
            if self.pipeline == "tf.data":
                from mlperf_keras.inputs import maskrcnn, records

                dataset = maskrcnn.train_dataset(self.paths, epoch=data_pass, **options)
                yield from records.backend_batches(dataset.skip(skip))
            else:
                from mlperf_keras.inputs import jpeg_batches, maskrcnn_jax

                yield from maskrcnn_jax.train_batches(self.paths, jpeg_batches.make_decoder(self.pipeline),
                                                      epoch=data_pass, groups=self.groups, skip=skip, **options)
            data_pass, skip = data_pass + 1, 0


def synthetic_batch(hp: dict, batch: int, seed: int, group: int = LANDSCAPE) -> tuple[dict, np.ndarray]:
    """One batch of the real shapes of an orientation group (NumPy only): random pixels, seven objects per image
    (COCO's mean is about 7.3) with random classes, each object a 32-gon ellipse filling its box."""
    rng = np.random.default_rng(seed)
    height, width = padded_shape(group, hp["min_size"], hp["max_size"])
    g, e = hp["max_gt"], hp["max_vertices"]
    objects = min(7, g)
    x1 = rng.uniform(0, width * 0.7, (batch, objects))
    y1 = rng.uniform(0, height * 0.7, (batch, objects))
    w, h = rng.uniform(16, width * 0.3, (batch, objects)), rng.uniform(16, height * 0.3, (batch, objects))
    boxes = np.zeros((batch, g, 4), np.float32)
    boxes[:, :objects] = np.stack([x1, y1, x1 + w, y1 + h], axis=-1)
    classes = np.zeros((batch, g), np.int32)
    classes[:, :objects] = rng.integers(1, hp["num_classes"], (batch, objects))
    sides = min(32, e)
    angles = np.arange(sides + 1) * (2 * np.pi / sides)
    cx, cy = x1 + w / 2, y1 + h / 2
    px = cx[..., None] + w[..., None] / 2 * np.cos(angles)       # (batch, objects, sides + 1), the first repeated
    py = cy[..., None] + h[..., None] / 2 * np.sin(angles)
    polygons = np.zeros((batch, g, e, 5), np.float32)   # part 0
    polygons[:, :objects, :sides, :4] = np.stack([px[..., :-1], py[..., :-1], px[..., 1:], py[..., 1:]], axis=-1)
    inputs = {"images": rng.integers(0, 256, (batch, height, width, 3), dtype=np.uint8),
              "image_sizes": np.tile(np.array([[height, width]], np.int32), (batch, 1)),
              "gt_boxes": boxes, "gt_classes": classes, "gt_polygons": polygons}
    return inputs, np.zeros(batch, np.float32)


class _CocoEvaluator(Evaluator):
    """COCO box and mask mAP over every val image: each worker predicts its shards, the detections and masks are
    gathered and scored once (metrics.coco_instances.CocoInstanceMetric)."""

    def __init__(self, config, dist, paths, annotation_file, categories, total, batch):
        from mlperf_keras.metrics import coco

        self.config, self.dist, self.paths = config, dist, paths
        self.annotation_file, self.num_samples, self.batch = annotation_file, total, batch
        self.label_to_category = coco.label_to_category_table(categories)
        self.metric = None
        self.paste = None

    def evaluate(self, predict):
        from mlperf_keras.metrics import coco_instances

        hp = self.config.hparams
        if self.metric is None:  # the chief loads the annotations once, at the first evaluation
            self.metric = coco_instances.CocoInstanceMetric(self.annotation_file, self.dist,
                                                            expected_images=self.num_samples)
            self.paste = coco_instances.PastePool(hp["paste_processes"])
        self.metric.reset()
        pending = []  # (image id, rows, future RLEs): the masks are pasted while the next batches are predicted
        from mlperf_keras.inputs import jpeg_batches

        pipeline = jpeg_batches.choose_pipeline(self.config.hparams["input_pipeline"])
        if pipeline == "tf.data":
            from mlperf_keras.inputs import maskrcnn, records

            batches = records.backend_batches(maskrcnn.eval_dataset(self.paths, batch_size=self.batch,
                                                                    min_size=hp["min_size"], max_size=hp["max_size"]))
        else:
            from mlperf_keras.inputs import maskrcnn_jax

            batches = maskrcnn_jax.eval_batches(self.paths, jpeg_batches.make_decoder(pipeline), batch_size=self.batch,
                                                min_size=hp["min_size"], max_size=hp["max_size"])
        for batch in batches:
            outputs = predict({"images": batch["images"], "image_sizes": batch["image_sizes"]})
            ids, sizes = np.asarray(batch["image_id"]), np.asarray(batch["image_sizes"])
            heights, widths = np.asarray(batch["height"]), np.asarray(batch["width"])
            for i in np.flatnonzero(ids >= 0):
                rows, masks, boxes = image_detections(outputs, i, int(ids[i]), sizes[i], int(heights[i]),
                                                      int(widths[i]), self.label_to_category)
                pending.append((int(ids[i]), rows, self.paste.submit(masks, boxes, heights[i], widths[i])))
        for image_id, rows, rles in pending:
            self.metric.add_image(image_id, rows, rles.result())
        return self.metric.result()
