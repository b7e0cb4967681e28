"""Per-step learning-rate schedules of the MLPerf references (keras.ops only: they run inside compiled steps).

`step` is the optimizer's iteration count before the update (0 for the first update), as TF1's global_step.
"""
from __future__ import annotations

import keras
from keras import ops


class StepWithWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """The ResNet v0.5 reference (resnet_run_loop.learning_rate_with_decay):

        lr(step) = initial * step / warmup_steps                     while step < warmup_steps
                 = initial * rates[i] for boundaries[i-1] < step <= boundaries[i]  (tf.train.piecewise_constant)

    with rates[0] = 1 before the first boundary. The first update has learning rate 0, as in the reference.
    """

    def __init__(self, initial: float, warmup_steps: int, boundaries, rates):
        if len(rates) != len(boundaries) + 1:
            raise ValueError(f"{len(boundaries)} boundaries need {len(boundaries) + 1} rates, got {len(rates)}")
        self.initial = float(initial)
        self.warmup_steps = int(warmup_steps)
        self.boundaries = [int(b) for b in boundaries]
        self.rates = [float(r) for r in rates]

    def __call__(self, step):
        step = ops.cast(step, "float32")
        lr = ops.full((), self.initial * self.rates[0], "float32")
        for boundary, rate in zip(self.boundaries, self.rates[1:]):
            lr = ops.where(step > boundary, self.initial * rate, lr)
        if self.warmup_steps > 0:
            lr = ops.where(step < self.warmup_steps, self.initial * step / self.warmup_steps, lr)
        return lr

    def get_config(self):
        return {"initial": self.initial, "warmup_steps": self.warmup_steps, "boundaries": self.boundaries,
                "rates": self.rates}


class WarmupMultiStepLR(keras.optimizers.schedules.LearningRateSchedule):
    """The Mask R-CNN reference's schedule (mlcommons/training 0badcd1786fcb007725ed05f1c44e9d80bbeac52,
    object_detection/pytorch/maskrcnn_benchmark/solver/lr_scheduler.py WarmupMultiStepLR, warmup_method "linear"),
    stepped as its engine/trainer.py do_train steps it: scheduler.step() before each update, so the 0-based update
    `step` runs at the scheduler's t = step + 1:

        lr(t) = base x factor(t) x gamma ** bisect_right(milestones, t)
        factor(t) = warmup_factor x (1 - t / warmup_steps) + t / warmup_steps   while t < warmup_steps, else 1
    """

    def __init__(self, base: float, warmup_steps: int, warmup_factor: float, milestones, gamma: float = 0.1):
        if list(milestones) != sorted(milestones):
            raise ValueError(f"milestones must increase, got {list(milestones)}")
        self.base, self.warmup_steps, self.warmup_factor = float(base), int(warmup_steps), float(warmup_factor)
        self.milestones, self.gamma = [int(m) for m in milestones], float(gamma)

    def __call__(self, step):
        t = ops.cast(step, "float32") + 1.0
        lr = ops.full((), self.base, "float32")
        for milestone in self.milestones:
            lr = ops.where(t >= milestone, lr * self.gamma, lr)
        if self.warmup_steps > 0:
            alpha = t / self.warmup_steps
            lr = ops.where(t < self.warmup_steps, lr * (self.warmup_factor * (1.0 - alpha) + alpha), lr)
        return lr

    def get_config(self):
        return {"base": self.base, "warmup_steps": self.warmup_steps, "warmup_factor": self.warmup_factor,
                "milestones": self.milestones, "gamma": self.gamma}


class PolynomialWithWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """The ResNet LARS reference (tensorflow2/lars_util.PolynomialDecayWithWarmup):

        lr(step) = initial * step / warmup_steps                                      while step <= warmup_steps
                 = (initial - end) * (1 - min(step - warmup_steps, D) / D) ** power + end   after

    with D = decay_steps (the reference: train_steps - warmup_steps + 1).
    """

    def __init__(self, initial: float, warmup_steps: int, decay_steps: int, end: float = 1e-4, power: float = 2.0):
        if decay_steps <= 0:
            raise ValueError(f"decay_steps must be positive, got {decay_steps}")
        self.initial, self.end, self.power = float(initial), float(end), float(power)
        self.warmup_steps, self.decay_steps = int(warmup_steps), int(decay_steps)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        decayed = ops.clip(step - self.warmup_steps, 0.0, float(self.decay_steps))
        lr = (self.initial - self.end) * (1.0 - decayed / self.decay_steps) ** self.power + self.end
        if self.warmup_steps > 0:
            lr = ops.where(step <= self.warmup_steps, self.initial * step / self.warmup_steps, lr)
        return lr

    def get_config(self):
        return {"initial": self.initial, "warmup_steps": self.warmup_steps, "decay_steps": self.decay_steps,
                "end": self.end, "power": self.power}


class WarmupMultiStep(keras.optimizers.schedules.LearningRateSchedule):
    """The GNMT reference's WarmupMultiStepLR (mlcommons/training rnn_translator/pytorch/seq2seq/train/
    lr_scheduler.py at 69dbe8b), exponential warmup then `decay_steps` halvings:

        e = step + 1   (the reference calls scheduler.step() before each optimizer.step(): update k uses e = k)
        lr(e) = base * 0.01 ** ((warmup_steps - e) / warmup_steps)                      while e <= warmup_steps
              = base * decay_factor ** min((e - remain_steps) // decay_interval + 1, decay_steps)
                                                                                        once e >= remain_steps
              = base                                                                    in between
    `gnmt_schedule_steps` turns the reference's fractions (remain_steps 0.666 of all iterations, decay_interval
    (iterations - remain_steps) // decay_steps) into these integers, which are also what the log reports.
    """

    def __init__(self, base: float, warmup_steps: int, remain_steps: int, decay_interval: int, decay_steps: int = 4,
                 decay_factor: float = 0.5):
        self.base, self.decay_factor = float(base), float(decay_factor)
        self.remain_steps, self.decay_interval = int(remain_steps), max(1, int(decay_interval))
        self.warmup_steps = min(int(warmup_steps), self.remain_steps)   # the reference caps warmup at remain_steps
        self.decay_steps = int(decay_steps)

    def __call__(self, step):
        e = ops.cast(step, "float32") + 1.0
        lr = ops.full((), self.base, "float32")
        decays = ops.minimum(ops.floor((e - self.remain_steps) / self.decay_interval) + 1.0, float(self.decay_steps))
        lr = ops.where(e >= self.remain_steps, self.base * ops.power(self.decay_factor, decays), lr)
        if self.warmup_steps > 0:
            warm = self.base * ops.power(0.01, (self.warmup_steps - e) / self.warmup_steps)
            lr = ops.where(e <= self.warmup_steps, warm, lr)
        return lr

    def get_config(self):
        return {"base": self.base, "warmup_steps": self.warmup_steps, "remain_steps": self.remain_steps,
                "decay_interval": self.decay_interval, "decay_steps": self.decay_steps,
                "decay_factor": self.decay_factor}


def gnmt_schedule_steps(total_steps: int, remain_fraction: float = 0.666, decay_steps: int = 4) -> tuple[int, int]:
    """(remain_steps, decay_interval) of the GNMT reference for `total_steps` iterations (perhaps_convert_float)."""
    remain = int(remain_fraction * total_steps)
    return remain, max(1, (total_steps - remain) // decay_steps)
