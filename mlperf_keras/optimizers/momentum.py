"""SGD with momentum and L2 weight decay, as the ResNet v0.5 reference trains (tf.train.MomentumOptimizer).

The reference adds wd * sum(||w||^2 / 2) over every trainable variable except batch-norm parameters to the loss and
applies tf.train.MomentumOptimizer. The gradient of that term is wd * w, so the update here is the same in exact
arithmetic, with the decay folded into the gradient instead of the loss:

    g' = g + wd * w        (decayed variables: all but batch-norm gamma/beta; the dense bias is decayed, as there)
    a  = m * a + g'        (a: the accumulator, starting at 0)
    w  = w - lr * a

Note the learning rate multiplies the accumulator when it is applied (TF1's ApplyMomentum), where Keras' SGD folds it
into the velocity (v = m * v - lr * g); the two differ while the learning rate changes (warmup, decay steps).
torch.optim.SGD(momentum, weight_decay, dampening=0, nesterov=False) is the same update, per parameter group: the
Mask R-CNN reference's groups (solver/build.py make_optimizer) are `decay` (no decay on biases) and
`lr_multiplier` (biases at 2x the learning rate: w = w - 2 lr a).
"""
from __future__ import annotations

import keras
from keras import ops


class MomentumSGD(keras.optimizers.Optimizer):
    def __init__(self, learning_rate=0.1, momentum: float = 0.9, weight_decay: float = 1e-4, decay=lambda v: True,
                 lr_multiplier=lambda v: 1.0, name: str = "momentum_sgd", **kwargs):
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"MomentumSGD: momentum {momentum} and weight_decay {weight_decay} must be >= 0")
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum = float(momentum)
        self.l2_weight_decay = float(weight_decay)
        self._decay_fn = decay
        self._lr_multiplier_fn = lr_multiplier

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.accumulators = self.add_optimizer_variables(variables, "accumulator")
        self.decayed = [bool(self._decay_fn(v)) for v in variables]
        self.lr_multipliers = [float(self._lr_multiplier_fn(v)) for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        grad = ops.cast(gradient, dtype)
        if self.decayed[index] and self.l2_weight_decay:
            grad = grad + self.l2_weight_decay * variable
        accumulator = self.accumulators[index]
        self.assign(accumulator, self.momentum * accumulator + grad)
        rate = ops.cast(learning_rate, dtype)
        if self.lr_multipliers[index] != 1.0:
            rate = rate * self.lr_multipliers[index]
        self.assign_sub(variable, rate * accumulator)

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "weight_decay": self.l2_weight_decay}
