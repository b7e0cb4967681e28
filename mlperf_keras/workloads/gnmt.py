"""GNMT on WMT16 En-De, uncased BLEU on newstest2014 (MLPerf translation, recurrent).

As the MLPerf reference, mlcommons/training rnn_translator/pytorch at commit 69dbe8b (the v0.6 reference, also
v0.7's): train.py defaults, seq2seq/train/{trainer,lr_scheduler,smoothing,fp_optimizers}.py,
seq2seq/data/sampler.py, seq2seq/inference/beam_search.py.
- Model: layers/gnmt.py (4 + 4 LSTM layers of 1024, normalized Bahdanau attention, dropout 0.2, U(-0.1, 0.1)).
- Loss: label smoothing 0.1 as smoothing.py, (1 - 0.1) * NLL + 0.1 * mean over the vocabulary of -log p, summed
  over the real target tokens and divided by the batch's sentences (trainer.py: loss /= B).
- Adam, lr 1e-3 (the reference's, at 128 sentences per worker; NVIDIA's v0.7 rates at the global batches NVIDIA
  ran, NVIDIA_LEARNING_RATES) (PyTorch's betas 0.9/0.999, eps 1e-8; the reference's PyTorch 1.0.1, its Dockerfile's,
  adds epsilon to sqrt(v) before the bias corrections enter the step size, as Keras' Adam does); gradients clipped
  to global norm 5 (clip_grad_norm_, here Adam's global_clipnorm, applied to the averaged gradients as the
  reference); WarmupMultiStepLR (optimizers/schedules.py): exponential warmup over 200 steps from 0.01 x lr, then
  4 halvings starting at 0.666 of the iterations of `schedule_epochs` (the reference's --epochs 8) epochs.
- Batches as the reference's BucketingSampler (seq2seq/data/sampler.py lines 169-229): `batch_size` sentences per
  worker from 5 length buckets (bucket width ceil(50 / 5)), each bucket cut into full global batches (its
  remainder dropped every epoch), every worker taking its slice of every global batch
  (text.GlobalBatchTrainPipeline), so steps per epoch are the reference's; training pairs up to 50 tokens with
  <s> and </s> (prepared by data_prep.wmt_gnmt).
- Evaluation every epoch over all 3,003 newstest2014 sentences: the reference's beam search
  (decoding.reference_gnmt_beam_search: beam 5, length normalisation ((5 + len) / 6)^0.6 with len counting <s>,
  coverage penalty 0.1, at most 150 positions, <s> included); BPE removed, detokenised with Moses' English rules
  (sacremoses; the reference's detokenizer.perl without -l), uncased sacrebleu with tokenize="intl" and 'exp'
  smoothing against the raw references, rounded to 2 decimals before the target test (the reference's sacrebleu
  1.2.10 command line), merged exactly across workers (metrics/bleu.py).
- Vocabulary: the prepared one, padded to a multiple of 8 under fp16/bf16 only (padded_vocab_size).
- Throughput: source + target tokens per second (the trainer's "Tok/s": src tokens with <s>/</s>, target tokens
  without <s>), counted per epoch over the real tokens of every batch.

Differences:
- Shuffling is a seeded buffer over shuffled shards, not a full permutation per bucket followed by one of the
  global batches; batches are padded to their bucket's length (fixed shapes, few compiles).
- --division=open with --hparams=beam_search=per_hypothesis: decoding.beam_search instead of the reference's
  search (K live and K finished hypotheses, each scored as it finishes with its own attention sums); on the demo
  it scored 63.01 against the reference's 62.99 (README, GNMT): no measurable gain.

Inputs of a training step: x = {"source": [B, S], "target_input": [B, T]}, y = [B, T]; ids 0 <pad>, 1 <unk>,
2 <s>, 3 </s>.
"""
from __future__ import annotations

import os

import numpy as np

from mlperf_keras.inputs import text, text_numpy, vocabulary
from mlperf_keras.inputs.manifest import worker_shards
from mlperf_keras.workloads.translation import TextTrainData, TranslationWorkload

# WMT16 En-De as the reference prepares it (3,498,161 training pairs at max length 50; vocabulary 32,320 in
# NVIDIA's logs), for --dry_run and --synthetic without a prepared dataset.
WMT16 = {"vocab_size": 32_320, "train_pairs": 3_498_161, "eval_sentences": 3_003}
# learning_rate=0 (the default) picks Adam's rate by the global batch: NVIDIA's MLPerf v0.7 GNMT rates where NVIDIA
# published one (mlcommons/training_results_v0.7 NVIDIA/benchmarks/gnmt/implementations/pytorch: config_DGX1.sh
# 8 GPUs x 256 sentences, LR 2.0e-3, MAX_SEQ_LEN 75; config_DGXA100.sh 8 x 384 and config_DGX2.sh 16 x 192,
# 2.875e-3), the reference's 1e-3 (train.py --lr, at --train-batch-size 128 per GPU) for every other batch.
NVIDIA_LEARNING_RATES = {2048: 2.0e-3, 3072: 2.875e-3}
REFERENCE_LEARNING_RATE = 1e-3
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


def padded_vocab_size(size: int, precision: str) -> int:
    """The model's vocabulary: the prepared one padded to a multiple of 8 under mixed precision, as the reference's
    Tokenizer under --math fp16 (seq2seq/utils.py pad_vocabulary at 69dbe8b: 8 for fp16, 1 for its default fp32;
    bf16, which the reference does not have, pads as fp16). The padding ids are never in the data."""
    pad = 1 if precision == "fp32" else 8
    return (size + pad - 1) // pad * pad


def smoothed_loss(targets, logits, smoothing: float):
    """The reference's LabelSmoothing summed over non-padding targets, divided by the sentences (non-empty rows)."""
    from keras import ops

    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    targets = ops.cast(targets, "int32")
    nll = -ops.squeeze(ops.take_along_axis(log_probs, ops.expand_dims(targets, -1), axis=-1), -1)
    smooth = -ops.mean(log_probs, axis=-1)
    weights = ops.cast(ops.not_equal(targets, PAD_ID), "float32")
    total = ops.sum(((1.0 - smoothing) * nll + smoothing * smooth) * weights)
    sentences = ops.sum(ops.cast(ops.greater(ops.sum(weights, axis=1), 0.0), "float32"))
    return total / ops.maximum(sentences, 1.0)


class GNMT(TranslationWorkload):
    name = "gnmt"
    throughput_unit = "tokens"          # source + target tokens, the reference's and NVIDIA's Tok/s
    batch_unit = "sentences"
    train_flops_per_sample = 765e6 / 2  # ~765 MFLOP per target token (estimate, 3x the forward pass); about half per counted token
    dataset_name = "wmt16-en-de"
    prepare_command = "python -m data_prep.wmt --workload=gnmt --raw_dir=RAW --output_dir=DATA"
    default_max_epochs = 10
    demo_target = 60.0
    # The demo: the full structure at width 128 on 6,000 generated pairs (data_prep.wmt_gnmt.write_demo_raw), BPE
    # with enough merges (500) that every made-up word is one token, Adam at 5e-3 with the decay from epoch 13 of at
    # most 20 (default_epochs). Before (width 64, 40 merges: words split into pieces; decay from epoch 8 of 10) a
    # fresh seed at v0.7 ended at BLEU 35.6; at width 64 a seed can sit on a loss plateau for 15 epochs (seed 2 at
    # 1e-2). The seeds tried with these settings, their epochs and wall times are in the README's GNMT section.
    demo_hparams = {"hidden": 128, "num_layers": 4, "dropout": 0.0, "batch_size": 64, "learning_rate": 5e-3,
                    "warmup_steps": 20, "schedule_epochs": 20, "max_length": 20, "beam_size": 3,
                    "max_decode_length": 24, "eval_batch_size": 200, "shuffle_buffer": 4096}

    def default_epochs(self, hparams: dict, global_batch: int) -> int:
        """10, or the epochs the learning-rate schedule spans (schedule_epochs) where that is more (the demo's)."""
        return max(self.default_max_epochs, hparams["schedule_epochs"])

    def reference_hparams(self, ruleset):
        return {
            "hidden": 1024,
            "num_layers": 4,
            "dropout": 0.2,
            "init_range": 0.1,
            "label_smoothing": 0.1,
            "learning_rate": 0.0,         # 0: by the global batch (learning_rate(): 1e-3, or NVIDIA's at 2,048 / 3,072)
            "beta_1": 0.9,
            "beta_2": 0.999,
            "epsilon": 1e-8,
            "grad_clip": 5.0,
            "warmup_steps": 200,
            "remain_fraction": 0.666,     # decay starts at this fraction of all iterations
            "decay_steps": 4,
            "decay_factor": 0.5,
            "schedule_epochs": 8,         # the reference's --epochs: the iterations its schedule spans
            "batch_size": 128,            # sentences per worker
            "max_length": 50,             # tokens with <s> and </s>; longer pairs are discarded (75 allowed)
            "num_buckets": 5,
            "shuffle_buffer": 100_000,
            "input_reader": "auto",       # tf.data, or numpy (inputs/text_numpy: JAX without TensorFlow)
            "beam_size": 5,
            "alpha": 0.6,                 # length normalisation ((5 + len) / 6) ** alpha
            "coverage_penalty": 0.1,
            "beam_search": "reference",   # or per_hypothesis (open division): decoding/beam_search.py
            "max_decode_length": 150,     # positions with <s>, as the reference's --max-length-test
            "eval_batch_size": 128,       # the reference's --test-batch-size
            "eval_boundary_scale": 1.5,   # eval sources padded to 8 * 1.5^k (few compiled shapes)
            **WMT16,
        }

    _manifest = None  # the prepared data's manifest, kept by dataset_hparams for the logged schedule steps

    manifest_counts = (*TranslationWorkload.manifest_counts, "max_length")

    def dataset_hparams(self, manifest):
        self._manifest = manifest
        return super().dataset_hparams(manifest)

    def default_global_batch(self, hparams, num_workers, per_worker_preset):
        return (per_worker_preset or hparams["batch_size"]) * num_workers

    def check(self, config, manifest):
        from mlperf_keras.config import ConfigError

        hp = config.hparams
        text_numpy.choose_reader(hp["input_reader"], config.backend)   # refuses a bad value at start
        if manifest is not None and hp["max_length"] > manifest["counts"]["max_length"]:
            raise ConfigError(f"--hparams max_length={hp['max_length']} exceeds the prepared data's "
                              f"{manifest['counts']['max_length']}; prepare again with --max_length")
        if not 0.0 <= hp["dropout"] < 1.0 or not 0.0 <= hp["label_smoothing"] < 1.0:
            raise ConfigError("--hparams dropout and label_smoothing must lie in [0, 1)")
        if hp["max_decode_length"] < 2 or hp["beam_size"] < 1:
            raise ConfigError("--hparams max_decode_length must be at least 2 and beam_size at least 1")
        from mlperf_keras.decoding import SEARCHES

        if hp["beam_search"] not in SEARCHES:
            raise ConfigError(f"--hparams beam_search must be one of {', '.join(SEARCHES)}, not {hp['beam_search']!r}")
        if config.closed_division and hp["beam_search"] != "reference":
            raise ConfigError("--hparams beam_search=per_hypothesis is not the reference's search; pass "
                              "--division=open to use it")
        self._manifest = manifest

    # -- Model ----------------------------------------------------------------------------------------------------

    def build_model(self, config):
        from mlperf_keras.layers import gnmt

        hp = config.hparams
        options = gnmt.GNMTOptions(vocab_size=padded_vocab_size(hp["vocab_size"], config.precision),
                                   hidden=hp["hidden"], num_layers=hp["num_layers"], dropout=hp["dropout"],
                                   init_range=hp["init_range"])
        model = gnmt.GNMT(options, seed=config.seed, name="gnmt")
        model.build()
        self.label_smoothing = hp["label_smoothing"]
        self.model = model  # the evaluator decodes with the model the loop trains
        return model

    def schedule_steps(self, config, steps_per_epoch: int) -> dict:
        """The scheduler's integers, as the reference derives them from its iterations (and logs them)."""
        from mlperf_keras.optimizers.schedules import gnmt_schedule_steps

        hp = config.hparams
        total = steps_per_epoch * hp["schedule_epochs"]
        remain, interval = gnmt_schedule_steps(total, hp["remain_fraction"], hp["decay_steps"])
        return {"total": total, "warmup": min(hp["warmup_steps"], remain), "remain": remain, "interval": interval}

    @staticmethod
    def learning_rate(config) -> float:
        """--hparams learning_rate, or for 0 the rate for this global batch (NVIDIA_LEARNING_RATES, else 1e-3)."""
        return (config.hparams["learning_rate"]
                or NVIDIA_LEARNING_RATES.get(config.global_batch_size, REFERENCE_LEARNING_RATE))

    def build_optimizer(self, config, steps_per_epoch):
        import keras

        from mlperf_keras.optimizers.schedules import WarmupMultiStep

        hp = config.hparams
        s = self.schedule_steps(config, steps_per_epoch)
        schedule = WarmupMultiStep(self.learning_rate(config), s["warmup"], s["remain"], s["interval"],
                                   hp["decay_steps"], hp["decay_factor"])
        return keras.optimizers.Adam(learning_rate=schedule, beta_1=hp["beta_1"], beta_2=hp["beta_2"],
                                     epsilon=hp["epsilon"], global_clipnorm=hp["grad_clip"])

    label_smoothing = 0.1  # set from the run's config by build_model (loss() has the contract's signature)

    def loss(self, y_true, y_pred):
        return smoothed_loss(y_true, y_pred, self.label_smoothing)

    # -- Data -----------------------------------------------------------------------------------------------------

    def bucket_plan(self, config) -> text.BucketPlan:
        hp = config.hparams
        return text.sentence_bucket_plan(config.per_worker_batch_size, hp["max_length"], hp["num_buckets"])

    def samples_in_batch(self, batch, config):
        """Real source + target tokens (the reference's Tok/s: source with <s>/</s>, target without <s>)."""
        x, y = batch
        return int(np.count_nonzero(np.asarray(x["source"])) + np.count_nonzero(np.asarray(y)))

    def steps_per_epoch(self, config, manifest):
        """The reference sampler's count (text.global_batch_steps): full global batches per bucket, remainders
        dropped; without a manifest (synthetic data), of a WMT-like length mix of train_pairs."""
        hp = config.hparams
        if manifest is None:
            histogram = text.synthetic_length_histogram(hp["train_pairs"], hp["max_length"])
        else:
            histogram = text.worker_length_histogram(manifest, 0, 1)
        return text.global_batch_steps(self.bucket_plan(config), histogram, config.num_workers)

    def buckets_used(self, plan, config, dist, manifest):
        """The buckets holding at least one full global batch of the whole training set's pairs (the reference
        sampler drops the rest; text.GlobalBatchTrainPipeline)."""
        counts = plan.bucket_counts(text.worker_length_histogram(manifest, 0, 1))
        return [k for k, size in enumerate(plan.batch_sizes) if counts[k] >= size * dist.world_size]

    def zero_batch(self, rows, length):
        # <s> w1 .. wn </s> padded to the bucket's length: the decoder reads all but the last, predicts all but <s>
        return ({"source": np.zeros((rows, length), np.int32), "target_input": np.zeros((rows, length - 1), np.int32)},
                np.zeros((rows, length - 1), np.int32))

    def train_data(self, config, dist, manifest):
        steps = self.steps_per_epoch(config, manifest)
        files = [os.path.join(config.data_dir, f["name"]) for f in worker_shards(manifest, "train", 0, 1)]
        pipeline = text.GlobalBatchTrainPipeline(files, self.bucket_plan(config), config.hparams["max_length"], steps,
                                                 config.hparams["shuffle_buffer"], config.seed, dist.rank,
                                                 dist.world_size, as_numpy=config.backend != "tensorflow",
                                                reader=text_numpy.choose_reader(config.hparams["input_reader"],
                                                                                config.backend))
        return self.train_stream(pipeline, steps, manifest["counts"]["train_pairs"], config, dist)

    def train_stream(self, source, steps, samples, config, dist):
        return _CountingTrainData(source, steps, samples, self, config, dist)

    def evaluator(self, config, dist, manifest):
        hp = config.hparams
        if manifest is None:
            sources, references, detokenize = self.synthetic_eval_set(config)
            total = len(sources)
        else:
            sources, references, vocab_path = text.load_eval_records(
                config.data_dir, manifest, text_numpy.choose_reader(config.hparams["input_reader"], config.backend))
            detokenize = vocabulary.BpeVocabulary(vocab_path).decode
            total = manifest["counts"]["eval_sentences"]
        from mlperf_keras.metrics.bleu import BleuEvaluator

        # The reference's settings (seq2seq/inference/beam_search.py): max_length counts <s>, the search generates
        # the rest; lengths for the normalisation count <s> too.
        return BleuEvaluator(self.model, dist, sources, references, detokenize, total,
                             batch_size=hp["eval_batch_size"], min_boundary=8,
                             boundary_scale=hp["eval_boundary_scale"], eos_id=EOS_ID, jit_compile=config.jit_compile,
                             beam_size=hp["beam_size"], alpha=hp["alpha"], extra_length=0,
                             max_length=hp["max_decode_length"] - 1, coverage_penalty=hp["coverage_penalty"],
                             length_offset=1, start_id=BOS_ID, search=hp["beam_search"], smooth_method="exp",
                             decimals=2)

    # -- MLLOG ----------------------------------------------------------------------------------------------------

    def mllog_hparams(self, config):
        """closed_gnmt.yaml of ruleset 0.7.0 (global_batch_size is logged by the loop), plus Adam's settings."""
        hp = config.hparams
        s = self.schedule_steps(config, self.steps_per_epoch(config, self._manifest))
        return {"opt_name": "adam", "opt_base_learning_rate": self.learning_rate(config),
                "opt_adam_beta_1": hp["beta_1"], "opt_adam_beta_2": hp["beta_2"], "opt_adam_epsilon": hp["epsilon"],
                "opt_learning_rate_alt_decay_func": True, "opt_learning_rate_alt_warmup_func": True,
                "opt_learning_rate_decay_factor": hp["decay_factor"],
                "opt_learning_rate_decay_interval": s["interval"], "opt_learning_rate_decay_steps": hp["decay_steps"],
                "opt_learning_rate_remain_steps": s["remain"], "opt_learning_rate_warmup_steps": s["warmup"],
                "max_sequence_length": hp["max_length"]}


class _CountingTrainData(TextTrainData):
    """The batches of one epoch, counting their real tokens (samples_in_batch) for the epoch's tokens/s."""

    def __init__(self, source, steps, samples, workload, config, dist):
        super().__init__(source, steps, samples)
        self.workload, self.config, self.dist = workload, config, dist
        self._tokens = 0

    def batches(self, epoch):
        self._tokens = 0
        for batch in self.source.batches(epoch):
            self._tokens += self.workload.samples_in_batch(batch, self.config)
            yield batch

    def epoch_samples(self) -> int:
        """Tokens of the epoch just run, all workers together (the loop's throughput numerator)."""
        return int(self.dist.sum_across_workers([self._tokens])[0])
