"""Transformer (big) on WMT17 En-De, uncased BLEU on newstest2014 (MLPerf translation, non-recurrent).

Model (layers/transformer.py) as the MLPerf reference (translation/tensorflow/transformer, the TF official model
after tensor2tensor): 6 encoder + 6 decoder layers, d_model 1024, filter 4096, 16 heads, dropout 0.1 (residual,
attention weights and ReLU), pre-norm residual blocks with a final layer norm on each stack, one shared embedding
scaled by sqrt(d_model) that is also the output projection, sinusoidal positions. Loss: cross entropy with label smoothing 0.1 over non-padding
target tokens. Adam (0.9, 0.997, 1e-9) with the reference schedule lr = 2.0 * d_model^-0.5 * min(1, step / 16000)
* rsqrt(max(step, 16000)). Batches hold up to 4,096 tokens per worker, bucketed by length (inputs/text.py); pairs
longer than 256 tokens are discarded. Evaluation: beam search (beam 4, alpha 0.6, up to source length + 50 tokens)
over all of newstest2014, detokenised, uncased BLEU (sacrebleu, intl tokenisation) merged exactly across workers.
Closed division (Workload.check): dropout from a framework generator (hparam dropout_rng keras or rbg,
layers/dropout.py) and data prepared with the reference's subword vocabulary (data_prep.wmt --vocab_kind=subword).

Inputs of a training step: x = {"source": [B, L], "target_input": [B, L]} (targets shifted right behind a 0),
y = targets [B, L]; 0 is padding, 1 is EOS.
"""
from __future__ import annotations

import os

import numpy as np

from mlperf_keras.inputs import text, text_numpy
from mlperf_keras.inputs.manifest import worker_shards
from mlperf_keras.workloads.translation import TextTrainData, TranslationWorkload

# WMT17 En-De as the reference prepares it (europarl v7 + commoncrawl + news-commentary v12), for --dry_run and
# --synthetic without a prepared dataset.
WMT17 = {"vocab_size": 33_708, "train_pairs": 4_590_101, "eval_sentences": 3_003}
PAD_ID, EOS_ID = text.PAD_ID, text.EOS_ID


def _devices_per_worker() -> int:
    """Devices one worker splits its batches over (keras.distribution.DataParallel on JAX), else 1."""
    import sys

    if "keras" not in sys.modules:
        return 1
    import keras

    distribution = keras.distribution.distribution()
    return int(np.prod(distribution.device_mesh.shape)) if distribution is not None else 1


def learning_rate_schedule(base: float, d_model: int, warmup_steps: int):
    """The reference's schedule as a Keras LearningRateSchedule: base * d^-0.5 * min(1, s/w) * rsqrt(max(s, w))."""
    import keras
    from keras import ops

    class RsqrtWarmup(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = ops.cast(step, "float32")
            warmup = float(warmup_steps)
            return (base * d_model ** -0.5 * ops.minimum(1.0, step / warmup)
                    * ops.rsqrt(ops.maximum(step, warmup)))

        def get_config(self):
            return {"base": base, "d_model": d_model, "warmup_steps": warmup_steps}

    return RsqrtWarmup()


def smoothed_cross_entropy(targets, logits, smoothing: float, vocab_size: int):
    """Mean over non-padding target tokens of the label-smoothed cross entropy, minus its minimum (the entropy of the
    smoothed distribution), as the reference's padded_cross_entropy_loss. targets [B, T] int, logits [B, T, V]."""
    from keras import ops

    confidence = 1.0 - smoothing
    low = smoothing / (vocab_size - 1)
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    targets = ops.cast(targets, "int32")
    true_lp = ops.squeeze(ops.take_along_axis(log_probs, ops.expand_dims(targets, -1), axis=-1), -1)
    xent = -(confidence * true_lp + low * (ops.sum(log_probs, axis=-1) - true_lp))
    normaliser = -(confidence * np.log(confidence) + (vocab_size - 1) * low * np.log(low + 1e-20))
    weights = ops.cast(ops.not_equal(targets, PAD_ID), "float32")
    return ops.sum((xent - normaliser) * weights) / ops.maximum(ops.sum(weights), 1.0)


class Transformer(TranslationWorkload):
    name = "transformer"
    throughput_unit = "tokens"         # target tokens: real ones in samples_in_batch; the loop's rate uses the budget
    batch_unit = "tokens"              # a token budget: each length bucket takes budget // its length rows
    train_flops_per_sample = 1.26e9    # per target token, Transformer big (estimate: 3x the forward pass)
    dataset_name = "wmt17-en-de"
    prepare_command = "python -m data_prep.wmt --raw_dir=RAW --output_dir=DATA"
    default_max_epochs = 20
    demo_target = 80.0
    demo_hparams = {"d_model": 64, "num_layers": 2, "num_heads": 4, "filter_size": 128, "dropout": 0.0,
                    "warmup_steps": 200, "learning_rate": 1.0, "batch_tokens": 1024, "max_length": 32,
                    "boundary_scale": 1.5, "beam_size": 2, "extra_decode_length": 5, "eval_batch_size": 64,
                    "shuffle_buffer": 2048}

    def reference_hparams(self, ruleset):
        return {
            "vocab_size": WMT17["vocab_size"],
            "d_model": 1024,
            "num_layers": 6,
            "num_heads": 16,
            "filter_size": 4096,
            "dropout": 0.1,
            "dropout_rng": "keras",      # layers/dropout.py: keras (stock) | rbg (jax.random, JAX) | hash (open only)
            "label_smoothing": 0.1,
            "learning_rate": 2.0,
            "warmup_steps": 16_000,
            "beta_1": 0.9,
            "beta_2": 0.997,
            "epsilon": 1e-9,
            "batch_tokens": 4096,        # per worker, as the reference's 4,096 per GPU
            "max_length": 256,           # longer pairs are discarded (max_sequence_length, method "discard")
            "min_boundary": 8,           # length buckets as the reference (tensor2tensor): 8, then x1.1
            "boundary_scale": 1.1,
            "shuffle_buffer": 100_000,   # examples, after interleaving this worker's shuffled shards
            "input_reader": "auto",      # tf.data, or numpy (inputs/text_numpy: JAX without TensorFlow)
            "beam_size": 4,
            "alpha": 0.6,
            "extra_decode_length": 50,   # decode up to source length + 50 tokens
            "eval_batch_size": 64,       # sentences per beam-search batch on one worker
            "eval_boundary_scale": 1.5,  # eval source lengths are padded to 8 * 1.5^k (few compiled shapes)
            **WMT17,
        }

    def check(self, config, manifest):
        from mlperf_keras.config import ConfigError
        from mlperf_keras.layers.dropout import check_generator

        check_generator(config.hparams.get("dropout_rng", "keras"), config.backend, config.closed_division)
        text_numpy.choose_reader(config.hparams["input_reader"], config.backend)   # refuses a bad value at start
        tokenizer = (manifest or {}).get("options", {}).get("tokenizer", "sentencepiece")
        if manifest is not None and config.closed_division and tokenizer != "subword":
            raise ConfigError(f"{config.data_dir} was prepared with a {tokenizer} vocabulary; the closed division "
                              f"uses the reference's subword vocabulary: prepare it again with python -m "
                              f"data_prep.wmt (--vocab_kind=subword, the default), or pass --division=open")

    def default_global_batch(self, hparams, num_workers, per_worker_preset):
        return (per_worker_preset or hparams["batch_tokens"]) * num_workers

    def build_model(self, config):
        from mlperf_keras.layers.transformer import TransformerModel

        hp = config.hparams
        model = TransformerModel(hp["vocab_size"], hp["d_model"], hp["num_layers"], hp["num_heads"],
                                 hp["filter_size"], hp["dropout"], seed=config.seed,
                                 dropout_rng=hp.get("dropout_rng", "keras"), name="transformer")
        model.build()
        self.label_smoothing = hp["label_smoothing"]
        self.model = model  # the evaluator decodes with the model the loop trains
        return model

    def build_optimizer(self, config, steps_per_epoch):
        import keras

        hp = config.hparams
        return keras.optimizers.Adam(
            learning_rate=learning_rate_schedule(hp["learning_rate"], hp["d_model"], hp["warmup_steps"]),
            beta_1=hp["beta_1"], beta_2=hp["beta_2"], epsilon=hp["epsilon"])

    label_smoothing = 0.1  # set from the run's config by build_model (loss() has the contract's signature)

    def loss(self, y_true, y_pred):
        return smoothed_cross_entropy(y_true, y_pred, self.label_smoothing, int(y_pred.shape[-1]))

    def bucket_plan(self, config) -> text.BucketPlan:
        """Length buckets of one worker's token budget; batch rows divisible by the devices sharing a batch."""
        hp = config.hparams
        return text.BucketPlan.create(config.per_worker_batch_size, hp["max_length"], hp["min_boundary"],
                                      hp["boundary_scale"], multiple=_devices_per_worker())

    def samples_in_batch(self, batch, config):
        """Real (non-padding) target tokens: the unit of the reference's tokens/s."""
        return int(np.count_nonzero(np.asarray(batch[1])))

    def steps_per_epoch(self, config, manifest):
        return text.epoch_steps(self.bucket_plan(config), manifest, config.num_workers,
                                config.hparams["train_pairs"], config.hparams["max_length"])

    def buckets_used(self, plan, config, dist, manifest):
        """The buckets holding some of this worker's pairs (text.TrainPipeline batches them per worker), and the
        first bucket where the worker has fewer batches than the epoch's steps (the pipeline fills its epoch with
        empty batches of that shape)."""
        histogram = text.worker_length_histogram(manifest, dist.rank, dist.world_size)
        used = {int(k) for k in np.flatnonzero(plan.bucket_counts(histogram))}
        if plan.steps(histogram) < self.steps_per_epoch(config, manifest):
            used.add(0)
        return sorted(used)

    def zero_batch(self, rows, length):
        zeros = np.zeros((rows, length), np.int32)
        return text.to_model_inputs(zeros, zeros)

    def train_data(self, config, dist, manifest):
        plan = self.bucket_plan(config)
        steps = self.steps_per_epoch(config, manifest)
        files = [os.path.join(config.data_dir, f["name"])
                 for f in worker_shards(manifest, "train", dist.rank, dist.world_size)]
        return TextTrainData(text.TrainPipeline(files, plan, config.hparams["max_length"], steps,
                                                config.hparams["shuffle_buffer"], config.seed, dist.rank,
                                                as_numpy=config.backend != "tensorflow",
                                                reader=text_numpy.choose_reader(config.hparams["input_reader"],
                                                                                config.backend)),
                             steps, manifest["counts"]["train_pairs"])

    def evaluator(self, config, dist, manifest):
        hp = config.hparams
        if manifest is None:
            sources, references, detokenize = self.synthetic_eval_set(config)
            indices = np.arange(len(sources))
            total = len(sources)
        else:
            sources, indices, references, detokenize = text.load_eval_set(
                config.data_dir, manifest, text_numpy.choose_reader(config.hparams["input_reader"], config.backend))
            total = manifest["counts"]["eval_sentences"]
        from mlperf_keras.metrics.bleu import BleuEvaluator

        return BleuEvaluator(self.model, dist, sources, references, detokenize, total, indices=indices,
                             batch_size=hp["eval_batch_size"], min_boundary=hp["min_boundary"],
                             boundary_scale=hp["eval_boundary_scale"], eos_id=EOS_ID, jit_compile=config.jit_compile,
                             beam_size=hp["beam_size"], alpha=hp["alpha"], extra_length=hp["extra_decode_length"])

    def mllog_hparams(self, config):
        hp = config.hparams
        return {"opt_name": "adam", "opt_base_learning_rate": hp["learning_rate"],
                "opt_learning_rate_warmup_steps": hp["warmup_steps"],
                "opt_adam_beta_1": hp["beta_1"], "opt_adam_beta_2": hp["beta_2"],
                "opt_adam_epsilon": hp["epsilon"], "max_sequence_length": hp["max_length"]}
