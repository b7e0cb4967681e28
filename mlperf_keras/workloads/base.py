"""The workload contract: what the one training loop needs from each of the six workloads.

A workload module defines one subclass of Workload and nothing in the loop asks which workload it runs.
"""
from __future__ import annotations

import abc

from mlperf_keras.config import RunConfig, quality_reached
from mlperf_keras.interfaces import Evaluator, TrainData


def per_worker_eval_batch(config: RunConfig) -> int:
    """The eval batch of one worker: hparams eval_batch_size, where 0 means the per-worker training batch."""
    return config.hparams["eval_batch_size"] or config.per_worker_batch_size


class Workload(abc.ABC):
    name: str                 # the MLLOG benchmark name (submission_benchmark)
    metric_name: str          # how progress lines name the quality metric
    dataset_name: str         # what data_prep writes into the manifest's "dataset"
    prepare_command: str      # how a user prepares its data
    throughput_unit: str = "samples"      # what one "sample" of samples/s is (images, target tokens...)
    batch_unit: str = "samples"           # what --batch_size counts (--dry_run names it: images, tokens, ...)
    train_flops_per_sample: float = 0.0   # training FLOPs per sample at reference size (benchmark: fraction of peak)

    def samples_in_batch(self, batch, config: RunConfig) -> int:
        """How many samples (throughput_unit) one worker's batch really holds; token batches count real tokens."""
        return config.per_worker_batch_size

    @abc.abstractmethod
    def reference_hparams(self, ruleset: str) -> dict:
        """The reference hyperparameters for a ruleset: every key --hparams may override."""

    def dataset_hparams(self, manifest: dict | None) -> dict:
        """Hyperparameters that follow from the prepared data (vocabulary, users...); defaults when None."""
        return {}

    default_max_epochs: int = 50
    # --ruleset when none is given: v0.5 defines every workload (NCF exists only there), and its logs pass the
    # checks the reporter applies (compliance/rules.CHECKER_RULESET) except where a workload says otherwise.
    default_ruleset: str = "0.5"

    def default_epochs(self, hparams: dict, global_batch: int) -> int:
        """--max_epochs when none is given: default_max_epochs, unless the schedule in hparams (at this global
        batch) ends elsewhere."""
        return self.default_max_epochs

    uses_backbone_weights: bool = False   # takes --backbone_weights (an ImageNet-trained backbone)

    @abc.abstractmethod
    def default_global_batch(self, hparams: dict, num_workers: int, per_worker_preset: int | None) -> int:
        """The global batch when --batch_size is not given; per_worker_preset comes from a hardware flagfile."""

    def eval_due(self, epoch_index: int, config: RunConfig) -> bool:
        """Evaluate after this epoch (0-based)? Default: every epoch, as most references do."""
        return True

    @abc.abstractmethod
    def build_model(self, config: RunConfig):
        """A keras.Model written with keras.layers/keras.ops only (runs on TensorFlow and JAX)."""

    @abc.abstractmethod
    def build_optimizer(self, config: RunConfig, steps_per_epoch: int):
        ...

    @abc.abstractmethod
    def loss(self, y_true, y_pred):
        """The training loss, in keras.ops."""

    @abc.abstractmethod
    def train_data(self, config: RunConfig, dist, manifest: dict) -> TrainData:
        ...

    @abc.abstractmethod
    def synthetic_train_data(self, config: RunConfig, dist) -> TrainData:
        """Same shapes and dtypes as train_data, random content: measures the model, not the data."""

    def batch_shapes(self, config: RunConfig, dist, manifest: dict) -> list:
        """One (inputs, labels) batch for each shape this worker's training batches take, as train_data gives them
        (structure, shapes, dtypes; the values do not matter), worked out from config and manifest without reading
        the training data: the loop compiles the step for each ahead, from v0.6 before the clock starts
        (loop.compile_ahead). Default: the synthetic data's batch (one shape). A workload whose batches take several
        shapes says them all (the translation workloads' length buckets, Mask R-CNN's two orientations)."""
        return [next(iter(self.synthetic_train_data(config, dist).batches(0)))]

    @abc.abstractmethod
    def evaluator(self, config: RunConfig, dist, manifest: dict | None) -> Evaluator:
        """The real eval set, or a synthetic one when manifest is None."""

    def steps_per_epoch(self, config: RunConfig, manifest: dict | None) -> int:
        """Computed from counts alone (the manifest, or the reference dataset's sizes), for --dry_run."""
        raise NotImplementedError

    def describe(self, config: RunConfig) -> list[str]:
        """Extra lines --dry_run prints about the model (e.g. SSD's default boxes)."""
        return []

    def mllog_accuracy(self, metric: float, config: RunConfig):
        """The eval_accuracy value as the ruleset logs it (e.g. BLEU as a fraction from v0.7 on)."""
        return metric

    def target_reached(self, metric, config: RunConfig) -> bool:
        """Every part of the metric at or above its target; NaN never reaches it."""
        return quality_reached(metric, config.quality_target)

    def check(self, config: RunConfig, manifest: dict | None) -> None:
        """Validate the resolved config (hparam ranges, counts against the data) before the MLPerf log opens.
        Raise config.ConfigError with one line a user can act on; the default accepts everything."""

    @abc.abstractmethod
    def mllog_hparams(self, config: RunConfig) -> dict:
        """The MLLOG hyperparameter keys the ruleset demands, with their values."""

    def mllog_hparam_metadata(self, config: RunConfig) -> dict:
        """Metadata of some of those keys, e.g. {"max_sequence_length": {"method": "discard"}}."""
        return {}

    # The built-in demo (its data: data_prep/demos.py): a reduced model trained on small generated data.
    demo_target: float
    demo_hparams: dict = {}
    demo_jit_compile: bool = True   # False: the demo compiles its steps without XLA (whatever --jit_compile says)
