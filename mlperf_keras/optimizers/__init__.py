"""Optimizers and learning-rate schedules of the MLPerf references, as Keras 3 optimizers (TensorFlow and JAX).

- lars.LARS: layer-wise adaptive rate scaling exactly as MLPerf's LARS (ResNet v0.6+).
- momentum.MomentumSGD: tf.train.MomentumOptimizer's update with L2 weight decay (the ResNet v0.5 reference).
- schedules: linear warmup followed by step decay or polynomial decay, per step (WarmupMultiStepLR: Mask R-CNN's).
"""
from mlperf_keras.optimizers.lars import LARS
from mlperf_keras.optimizers.momentum import MomentumSGD
from mlperf_keras.optimizers.schedules import PolynomialWithWarmup, StepWithWarmup, WarmupMultiStepLR

__all__ = ["LARS", "MomentumSGD", "PolynomialWithWarmup", "StepWithWarmup", "WarmupMultiStepLR"]
