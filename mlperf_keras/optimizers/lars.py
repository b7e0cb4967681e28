"""LARS (You, Gitman, Ginsburg 2017, arXiv:1708.03888) as MLPerf's ResNet reference applies it.

The update for one variable w with gradient g, learning rate lr (the schedule's value at this step), momentum m,
weight decay wd, LARS coefficient eta and epsilon eps; v is the momentum buffer, starting at 0:

    adapted variables (by default every variable with 2 or more dimensions: convolution and dense kernels):
        trust = eta * ||w|| / (||g|| + wd * ||w|| + eps)   if ||w|| > 0 and ||g|| > 0, else 1
        v     = m * v + (lr * trust) * (g + wd * w)
        w     = w - v
    skipped variables (batch-norm gamma/beta and biases: every variable with fewer than 2 dimensions):
        v     = m * v + lr * g
        w     = w - v

||.|| is the L2 norm over the whole variable. This is the update of the TF2 LARS reference's `LARSOptimizer`
(mlcommons/training e8210745, image_classification/tensorflow2/lars_optimizer.py `compute_lr` and
`_resource_apply_dense`), which common.py builds with `skip_list=['batch_normalization', 'bias', 'bn']`: in ResNet
those names are exactly the 1-D variables. Skipped variables get neither weight decay nor the trust ratio. Weight
decay is part of the update only: that reference adds no L2 term to the loss when it trains with LARS
(resnet_runnable.py computes the L2 loss only `if not self.use_lars_optimizer`).

Where the references differ from this:
- the TF1 reference of the v0.6 and v0.7 rounds (mlcommons/training 6cb3d426,
  image_classification/tensorflow/official/resnet/resnet_run_loop.py) decays twice: tf.contrib.opt.LARSOptimizer
  with weight_decay inside the update, and weight_decay x sum(||w||^2 / 2) over every variable but batch norm added
  to the loss, whatever the optimizer. Only the decay inside the update is done here;
- the TF2 reference uses `epsilon or backend_config.epsilon()`, which turns the logged 0.0 into 1e-7; here epsilon is
  used as given.
"""
from __future__ import annotations

import keras
from keras import ops


def adapt_matrices(variable) -> bool:
    """The default LARS selection: kernels (>= 2 dimensions) are adapted, biases and batch-norm parameters not."""
    return len(variable.shape) >= 2


class LARS(keras.optimizers.Optimizer):
    def __init__(self, learning_rate=0.1, momentum: float = 0.9, weight_decay: float = 1e-4, eta: float = 0.001,
                 epsilon: float = 0.0, adapt=adapt_matrices, name: str = "lars", **kwargs):
        if momentum < 0 or weight_decay < 0 or eta <= 0 or epsilon < 0:
            raise ValueError(f"LARS: momentum {momentum}, weight_decay {weight_decay} and epsilon {epsilon} must be "
                             f">= 0 and eta {eta} > 0")
        # The base class's own (decoupled, AdamW-style) weight_decay stays off: decay is inside the LARS update.
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum = float(momentum)
        self.lars_weight_decay = float(weight_decay)
        self.eta = float(eta)
        self.epsilon = float(epsilon)
        self._adapt_fn = adapt

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum")
        self.adapted = [bool(self._adapt_fn(v)) for v in variables]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        grad = ops.cast(gradient, dtype)
        velocity = self.momentums[index]
        if self.adapted[index]:
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            g_norm = ops.sqrt(ops.sum(ops.square(grad)))
            denominator = g_norm + self.lars_weight_decay * w_norm + self.epsilon
            ratio = self.eta * w_norm / ops.where(denominator > 0, denominator, ops.ones_like(denominator))
            trust = ops.where(ops.logical_and(w_norm > 0, g_norm > 0), ratio, ops.ones_like(ratio))
            lr = lr * trust
            grad = grad + self.lars_weight_decay * variable
        self.assign(velocity, self.momentum * velocity + lr * grad)
        self.assign_sub(variable, velocity)

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "weight_decay": self.lars_weight_decay,
                "eta": self.eta, "epsilon": self.epsilon}
