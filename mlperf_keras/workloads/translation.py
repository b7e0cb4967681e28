"""What the two translation workloads (workloads/gnmt.py, workloads/transformer.py) do alike: BLEU as the metric and
its MLLOG scale, the discarding max_sequence_length, the counts a prepared WMT manifest gives, and synthetic data
(training batches and an eval set) in the dataset's vocabulary and lengths."""
from __future__ import annotations

import abc

from mlperf_keras.inputs import text
from mlperf_keras.interfaces import TrainData
from mlperf_keras.workloads.base import Workload


class TextTrainData(TrainData):
    """A text batch source (inputs.text: a pipeline, or SyntheticTextBatches) as the loop's training stream."""

    def __init__(self, source, steps, samples):
        self.source, self.steps_per_epoch, self.samples_per_epoch = source, steps, samples

    def batches(self, epoch):
        return self.source.batches(epoch)


class TranslationWorkload(Workload):
    metric_name = "BLEU"
    # The manifest counts that replace the reference dataset's in the hparams (dataset_hparams).
    manifest_counts: tuple[str, ...] = ("vocab_size", "train_pairs", "eval_sentences")

    def dataset_hparams(self, manifest):
        if manifest is None:
            return {}
        return {key: manifest["counts"][key] for key in self.manifest_counts}

    def train_stream(self, source, steps: int, samples: int, config, dist) -> TrainData:
        """The loop's training stream over a batch source; a workload that counts its batches' tokens wraps it."""
        return TextTrainData(source, steps, samples)

    def synthetic_train_data(self, config, dist):
        hp = config.hparams
        steps = self.steps_per_epoch(config, None)
        source = text.SyntheticTextBatches(self.bucket_plan(config), hp["vocab_size"], hp["max_length"],
                                           hp["train_pairs"] // config.num_workers, steps, config.seed + dist.rank)
        return self.train_stream(source, steps, hp["train_pairs"], config, dist)

    @staticmethod
    def synthetic_eval_set(config):
        """(sources, references, detokenize) of eval_sentences random sentences (inputs.text.synthetic_eval_set)."""
        hp = config.hparams
        return text.synthetic_eval_set(hp["eval_sentences"], hp["vocab_size"], min(hp["max_length"], 64),
                                       config.seed)

    @abc.abstractmethod
    def bucket_plan(self, config) -> text.BucketPlan:
        """The length buckets of one worker's batches."""

    @abc.abstractmethod
    def buckets_used(self, plan: text.BucketPlan, config, dist, manifest: dict) -> list[int]:
        """The buckets whose shape this worker's training batches take in an epoch (from the manifest's length
        histograms)."""

    @abc.abstractmethod
    def zero_batch(self, rows: int, length: int):
        """A training batch of zeros of one bucket's shape, as the pipeline gives it: (inputs, labels)."""

    def batch_shapes(self, config, dist, manifest):
        plan = self.bucket_plan(config)
        return [self.zero_batch(plan.batch_sizes[k], plan.lengths[k])
                for k in self.buckets_used(plan, config, dist, manifest)]

    def mllog_hparam_metadata(self, config):
        return {"max_sequence_length": {"method": "discard"}}

    def mllog_accuracy(self, metric, config):
        """BLEU is logged out of 100 in v0.5/v0.6 and as a fraction from v0.7 on."""
        return metric if config.ruleset in ("0.5", "0.6") else metric / 100.0
