"""Compiled train and predict steps for the active Keras backend.

The loop calls `TrainStep(x, y)` per batch and `predict(x)` during evaluation; how that is compiled (tf.function +
XLA on TensorFlow, jax.jit on JAX) and where gradients are averaged lives here and in distribute.py only.
"""
from __future__ import annotations

import keras
import numpy as np


def make_train_step(model, optimizer, loss_fn, dist, jit_compile: bool = True):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return _TensorFlowTrainStep(model, optimizer, loss_fn, dist, jit_compile)
    if backend == "jax":
        return _JaxTrainStep(model, optimizer, loss_fn, dist, jit_compile)
    raise RuntimeError(f"Keras backend {backend!r} is not supported; use tensorflow or jax")


class _TensorFlowTrainStep:
    def __init__(self, model, optimizer, loss_fn, dist, jit_compile):
        import tensorflow as tf

        self.model, self.optimizer = model, optimizer
        variables = model.trainable_variables
        optimizer.build(variables)

        def gradients(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled = optimizer.scale_loss(loss)
            return loss, tape.gradient(scaled, variables)

        if dist.world_size == 1:
            @tf.function(jit_compile=jit_compile)
            def step(x, y):
                loss, grads = gradients(x, y)
                optimizer.apply(grads, variables)
                return loss
            self._step = step
        else:
            # Collective ops have no XLA kernel: compile the maths, average outside the compiled function.
            compiled_gradients = tf.function(gradients, jit_compile=jit_compile)

            @tf.function
            def step(x, y):
                loss, grads = compiled_gradients(x, y)
                optimizer.apply(dist.average_gradients(grads), variables)
                return loss
            self._step = step
        self._predict = tf.function(lambda x: model(x, training=False), jit_compile=jit_compile)

    def __call__(self, x, y):
        return self._step(x, y)

    def to_device(self, batch):
        """Copy a host batch to the accelerator once (synthetic data and benchmarks)."""
        import tensorflow as tf

        with tf.device("/GPU:0" if accelerator_present() else "/CPU:0"):
            return tf.nest.map_structure(lambda a: tf.identity(tf.convert_to_tensor(a)), batch)

    def predict(self, x):
        return _to_numpy(self._predict(x))

    def sync_to_model(self):
        """Variables are updated in place on TensorFlow."""

    def reload_from_model(self):
        """Variables are the step's state on TensorFlow (a restored checkpoint is already in them)."""


class _JaxTrainStep:
    """Pure-function training: state lives in jax arrays between steps and is written back on sync_to_model()."""

    def __init__(self, model, optimizer, loss_fn, dist, jit_compile):
        import jax

        # Variables are replicated by keras.distribution; a sharded batch makes XLA all-reduce the gradients.
        self.dist = dist
        self.model, self.optimizer = model, optimizer
        optimizer.build(model.trainable_variables)

        def compute_loss(trainable, non_trainable, opt_vars, x, y):
            pred, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
            loss = loss_fn(y, pred)
            # Differentiate the loss as the optimizer scales it: LossScaleOptimizer (fp16) divides the gradients by
            # its dynamic scale in stateless_apply, so the gradient must be of the scaled loss. The scale is read
            # from this step's optimizer state (the stateless value), not from the Keras variable, which is only
            # written at sync. Other optimizers' scale_loss returns the loss as it is.
            with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, opt_vars))):
                scaled = optimizer.scale_loss(loss)
            return scaled, (loss, non_trainable)

        grad_fn = jax.value_and_grad(compute_loss, has_aux=True)

        def step(state, x, y):
            trainable, non_trainable, opt_vars = state
            (_, (loss, non_trainable)), grads = grad_fn(trainable, non_trainable, opt_vars, x, y)
            trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
            return loss, (trainable, non_trainable, opt_vars)

        def predict(trainable, non_trainable, x):
            return model.stateless_call(trainable, non_trainable, x, training=False)[0]

        wrap = (lambda f, **kw: jax.jit(f, **kw)) if jit_compile else (lambda f, **kw: f)
        self._step = wrap(step, donate_argnums=(0,))
        self._predict = wrap(predict)
        self._state = self._read_state()
        self._predict_state = self._predict_state_for = None
        self._precompiled = set()   # the batch shapes precompile() compiled

    def _read_state(self):
        # Copies: the step donates its state buffers, and the Keras variables must stay readable until sync.
        import jax.numpy as jnp

        # With several processes the state is replicated over every process's devices (the variables are not).
        copy = lambda v: self.dist.replicate(jnp.copy(v.value))  # noqa: E731
        return ([copy(v) for v in self.model.trainable_variables],
                [copy(v) for v in self.model.non_trainable_variables],
                [copy(v) for v in self.optimizer.variables])

    def __call__(self, x, y):
        loss, self._state = self._step(self._state, *self.dist.shard_batch((x, y)))
        return loss

    def precompile(self, batches, threads: int | None = None, say=None) -> dict:
        """Compile the step ahead for every distinct (x, y) shape among `batches`, the compilations concurrently.

        Only when and where compilation happens changes: each shape is traced and lowered here, in the calling thread
        (Keras keeps its distribution, dtype policy and scopes per thread, so tracing elsewhere could trace another
        computation), with the very arguments a call passes (this step's state, the batch as shard_batch gives it), and
        XLA compiles the lowered modules on `threads` threads (it releases the GIL), tracing the next shape meanwhile.
        jax.jit keeps an ahead-of-time compilation in the cache its calls look in, so a later step(x, y) of a
        precompiled shape runs that executable without compiling again (tests/test_precompile.py pins it).
        Returns {"shapes": distinct shapes, "compiled": newly compiled, "threads", "seconds"}; say(str) gets progress.
        """
        import concurrent.futures
        import os
        import time

        started = time.perf_counter()
        pending, seen = [], self._precompiled
        if not hasattr(self._step, "lower"):   # jit_compile=False: nothing is compiled
            return {"shapes": 0, "compiled": 0, "threads": 0, "seconds": 0.0}
        for x, y in batches:
            key = _shape_key((x, y))
            if key not in seen:
                seen.add(key)
                pending.append((x, y))
        threads = max(1, min(len(pending), threads or min(MAX_COMPILE_THREADS, os.cpu_count() or 1))) if pending \
            else 0
        if say and pending:
            say(f"compiling {len(pending)} batch shapes on {threads} threads...")
        if pending:
            with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="compile") as pool:
                futures = [pool.submit(self._step.lower(self._state, *self.dist.shard_batch(batch)).compile)
                           for batch in pending]
                last_said = time.perf_counter()
                for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                    future.result()
                    if say and done < len(pending) and time.perf_counter() - last_said >= PROGRESS_SECONDS:
                        last_said = time.perf_counter()
                        say(f"  {done}/{len(pending)} batch shapes compiled, {last_said - started:.0f} s")
        seconds = time.perf_counter() - started
        if say and pending:
            say(f"compiled {len(pending)} batch shapes in {seconds:.1f} s")
        return {"shapes": len(seen), "compiled": len(pending), "threads": threads, "seconds": seconds}

    def to_device(self, batch):
        """Copy a host batch to the accelerator(s) once, already split over the devices."""
        import jax

        return jax.block_until_ready(self.dist.shard_batch(jax.tree_util.tree_map(jax.numpy.asarray, batch)))

    def predict(self, x):
        # Each process evaluates its own share, whose batch count may differ from the others': the model runs on
        # this process's devices (a jit over every process's devices would be a collective all must join).
        if self._predict_state_for is not self._state:
            trainable, non_trainable, _ = self._state
            self._predict_state = ([self.dist.local_replica(v) for v in trainable],
                                   [self.dist.local_replica(v) for v in non_trainable])
            self._predict_state_for = self._state
        return _to_numpy(self._predict(*self._predict_state, x))

    def sync_to_model(self):
        # This process's copy: whatever reads the model afterwards (an evaluator's own decoder, a checkpoint) computes
        # on this process alone.
        trainable, non_trainable, opt_vars = self._state
        for var, value in zip(self.model.trainable_variables, trainable):
            var.assign(self.dist.local_replica(value))
        for var, value in zip(self.model.non_trainable_variables, non_trainable):
            var.assign(self.dist.local_replica(value))
        for var, value in zip(self.optimizer.variables, opt_vars):
            var.assign(self.dist.local_replica(value))

    def reload_from_model(self):
        """Take the Keras variables' values as the step's state again (after a checkpoint was restored into them)."""
        self._state = self._read_state()


# precompile()'s default threads: at most the host's cores, and at most this many, since every compilation in flight
# holds its module in host memory (a big model's can take gigabytes).
MAX_COMPILE_THREADS = 8
# ... and says how far it is every this many seconds (a Transformer's 20-odd shapes take minutes on a GPU).
PROGRESS_SECONDS = 30.0


def _shape_key(batch) -> tuple:
    """What a compiled step is specific to in a batch: its structure and each array's shape and dtype."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(batch)
    return treedef, tuple((tuple(np.shape(a)), str(getattr(a, "dtype", None) or np.asarray(a).dtype)) for a in leaves)


def accelerator_present() -> bool:
    """Does the active backend compute on a GPU (or another accelerator) rather than the CPU?"""
    if keras.backend.backend() == "jax":
        import jax

        return jax.default_backend() != "cpu"
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def compile_function(function):
    """A keras.ops function compiled whole for the active backend (jax.jit, or tf.function with XLA): for input
    work done on the device (inputs/ncf_device.py)."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(function)
    import tensorflow as tf

    return tf.function(function, jit_compile=True)


def _to_numpy(outputs):
    """float32 NumPy model outputs: one array, or a tuple of arrays for models with several outputs (SSD), or a dict
    of NumPy arrays of their own dtypes."""
    if isinstance(outputs, (tuple, list)):
        return tuple(np.asarray(o, dtype=np.float32) for o in outputs)
    if isinstance(outputs, dict):   # named outputs (Mask R-CNN's detections) keep their dtypes: labels, flags
        return {k: np.asarray(v) for k, v in outputs.items()}
    return np.asarray(outputs, dtype=np.float32)


def set_random_seed(seed: int) -> None:
    """keras.utils.set_random_seed, without importing TensorFlow on other backends (it imports TF when installed,
    which a JAX-only run must not pay for or depend on)."""
    if keras.backend.backend() == "tensorflow":
        keras.utils.set_random_seed(seed)
        return
    import random

    from keras.src.backend.common import global_state
    from keras.src.random import seed_generator
    from keras.src.utils.rng_utils import GLOBAL_RANDOM_SEED

    global_state.set_global_attribute(GLOBAL_RANDOM_SEED, seed)
    global_state.set_global_attribute(seed_generator.GLOBAL_SEED_GENERATOR, None)
    random.seed(seed)
    np.random.seed(seed)
