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
