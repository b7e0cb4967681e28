"""What the one training loop reads from a workload: its training stream (TrainData) and its evaluator (Evaluator),
with the synthetic ones every workload can use. Below both workloads/ and metrics/ (metrics/bleu.py implements an
Evaluator), so neither imports the other for them."""
from __future__ import annotations

import abc
from typing import Any, Callable, Iterator


class TrainData(abc.ABC):
    """The training stream of one worker."""
    steps_per_epoch: int
    samples_per_epoch: int  # global: all workers together

    @abc.abstractmethod
    def batches(self, epoch: int) -> Iterator[tuple[Any, Any]]:
        """The (inputs, labels) batches of one epoch for this worker; exactly steps_per_epoch of them."""


class Evaluator(abc.ABC):
    """Computes the quality metric over the whole eval set, merged exactly across workers."""
    num_samples: int  # global eval-set size, logged as eval_samples

    @abc.abstractmethod
    def evaluate(self, predict: Callable):
        """predict(inputs) -> numpy scores. Returns the metric, identical on every worker: a float, or a mapping
        part -> float where the quality has several parts (Mask R-CNN: {"bbox": .., "segm": ..})."""


class RepeatedBatch(TrainData):
    """One batch served steps_per_epoch times: synthetic data that measures the model and the loop, not the input."""

    def __init__(self, batch, steps_per_epoch: int, *, samples_per_epoch: int):
        self.batch, self.steps_per_epoch, self.samples_per_epoch = batch, steps_per_epoch, samples_per_epoch

    def batches(self, epoch):
        for _ in range(self.steps_per_epoch):
            yield self.batch


class SyntheticForwardEvaluator(Evaluator):
    """The eval set's forward passes on random inputs: this worker's share of num_samples, batch_rows at a time (all
    of `inputs` each time). The metric, 0 for each of its parts, means nothing; it is merged across workers as a real
    one is. parts: the names of a metric with several parts (a mapping), or () for a float."""

    def __init__(self, inputs, batch_rows: int, num_samples: int, dist, parts: tuple[str, ...] = ()):
        self.inputs, self.batch_rows, self.parts = inputs, batch_rows, parts
        self.num_samples, self.dist = num_samples, dist
        self.local = worker_share(num_samples, dist.rank, dist.world_size)

    def evaluate(self, predict):
        for _ in range(0, self.local, self.batch_rows):
            predict(self.inputs)
        sums = self.dist.sum_across_workers([0.0] * max(1, len(self.parts)))
        return {part: float(v) for part, v in zip(self.parts, sums)} if self.parts else float(sums[0])


def worker_share(total: int, rank: int, world_size: int) -> int:
    """How many of total items worker rank takes when they are split as evenly as can be (lower ranks one more)."""
    return total // world_size + (rank < total % world_size)
