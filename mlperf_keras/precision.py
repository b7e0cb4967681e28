"""--precision: fp32, fp16 (mixed, with dynamic loss scaling) or bf16 (mixed)."""
from __future__ import annotations

_POLICIES = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}


def set_policy(precision: str) -> None:
    import keras

    keras.config.set_dtype_policy(_POLICIES[precision])


def wrap_optimizer(optimizer, precision: str):
    """fp16 needs loss scaling against gradient underflow; bf16 has fp32's exponent range and does not."""
    if precision != "fp16":
        return optimizer
    import keras

    return keras.optimizers.LossScaleOptimizer(optimizer)
