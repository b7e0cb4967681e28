"""NCF: NeuMF on MovieLens-20M, HR@10 over 1 positive + 999 negatives per user (MLPerf v0.5 recommendation).

Reference: mlcommons/training fe17e837ed12974d15c86d5173fe8f2c188434d5 (the v0.5 round), recommendation/pytorch.
Model as its neumf.py: GMF (user x item embeddings of mf_dim, elementwise product) beside an MLP over the
concatenated user/item embeddings (mlp_layers[0]/2 each) with ReLU layers mlp_layers[1:], one logit over the
concatenation of both branches. Init as neumf.py: embeddings N(0, 0.01); MLP kernels Glorot-uniform; the final
kernel LeCun-uniform; dense biases PyTorch's nn.Linear default U(+-1/sqrt(fan_in)), which neumf.py leaves alone;
every table and layer draws from its own stream of one keras.random.SeedGenerator(seed).
Hyperparameters: NVIDIA's v0.5 submission (global batch 1,048,576 kept fixed for any GPU count, Adam lr 0.0045,
beta1 0.25, beta2 0.5, eps 1e-8), 4 negatives per positive redrawn every epoch; at most 20 epochs (ncf.py's
--epochs default). Evaluation (inputs/ncf.py, metrics/ranking.py) as ncf.py and convert.py: 999 negatives per user
drawn with replacement at run start, repeats counted once, the test item last among equal scores.
"""
from __future__ import annotations

import os

import numpy as np

from mlperf_keras.config import ConfigError
from mlperf_keras.inputs import ncf as ncf_input
from mlperf_keras.inputs.manifest import worker_shards
from mlperf_keras.interfaces import Evaluator, TrainData
from mlperf_keras.metrics.ranking import hits_at_k
from mlperf_keras.workloads.base import Workload

# ml-20m after the reference filtering (the reference's filtering: users with at least 20 ratings), for --dry_run and --synthetic without data.
ML20M = {"num_users": 138_493, "num_items": 26_744, "train_positives": 20_000_263 - 138_493}


class NCF(Workload):
    name = "ncf"
    metric_name = "HR@10"
    dataset_name = "movielens-20m"
    prepare_command = "python -m data_prep.movielens --raw_dir=RAW --output_dir=DATA"
    throughput_unit = "samples"
    batch_unit = "samples"              # user-item pairs (a positive or a drawn negative)
    train_flops_per_sample = 0.64e6  # (user, item) pairs: forward 0.21 MFLOP through the MLP, x3 for training
    default_max_epochs = 20  # the reference ncf.py --epochs default (mlcommons/training fe17e837)
    demo_target = 0.40
    demo_hparams = {"mf_dim": 16, "mlp_layers": (64, 64, 32, 16), "learning_rate": 0.002,
                    "beta_1": 0.9, "beta_2": 0.999, "batch_size": 16_384}

    def reference_hparams(self, ruleset: str) -> dict:
        return {
            "mf_dim": 64,
            "mlp_layers": (256, 256, 128, 64),
            "negatives": 4,
            "learning_rate": 0.0045,
            "beta_1": 0.25,
            "beta_2": 0.5,
            "epsilon": 1e-8,
            "batch_size": 1_048_576,      # global, fixed across GPU counts as NVIDIA ran it
            "eval_batch_size": 1_048_576,  # candidates scored per predict call on one worker
            "top_k": 10,
            "eval_negatives": 999,        # per user, drawn with replacement at run start (inputs/ncf.py)
            # Where each epoch's negatives and shuffle are computed: "device" (inputs/ncf_device.py, on the GPU),
            # "host" (inputs/ncf.py, NumPy on this worker's cores) or "auto" (device when a GPU is present).
            "epoch_build": "auto",
            **ML20M,
        }

    def dataset_hparams(self, manifest):
        if manifest is None:
            return {}
        counts = manifest["counts"]
        return {"num_users": counts["num_users"], "num_items": counts["num_items"],
                "train_positives": counts["train_positives"]}

    def default_global_batch(self, hparams, num_workers, per_worker_preset):
        return hparams["batch_size"]  # NVIDIA kept the global batch fixed for every GPU count

    def check(self, config, manifest):
        """Ranges that would otherwise fail (or hang in the negative sampler) after the MLPerf log opened."""
        hp = config.hparams
        if manifest is not None and "eval_negatives" in manifest["counts"]:
            raise ConfigError(f"{config.data_dir} was prepared by an older data_prep.movielens that drew the eval "
                              f"negatives in advance; they are now drawn at run start: prepare it again")
        if hp["eval_negatives"] < 1:
            raise ConfigError(f"eval_negatives={hp['eval_negatives']}: must be at least 1")
        if hp["epoch_build"] not in ("auto", "device", "host"):
            raise ConfigError(f"epoch_build={hp['epoch_build']!r}: choose auto, device or host")
        if not hp["mlp_layers"] or hp["mlp_layers"][0] % 2 or min(hp["mlp_layers"]) < 1:
            raise ConfigError(f"mlp_layers={'-'.join(map(str, hp['mlp_layers']))}: positive widths, the first even "
                              f"(it is the concatenated user+item embedding)")
        if hp["mf_dim"] < 1 or hp["negatives"] < 1:
            raise ConfigError(f"mf_dim={hp['mf_dim']}, negatives={hp['negatives']}: both at least 1")
        if not 1 <= hp["top_k"] <= hp["eval_negatives"] + 1:
            raise ConfigError(f"top_k={hp['top_k']}: between 1 and the {hp['eval_negatives'] + 1} candidates per user")
        if hp["num_items"] < 2 or hp["num_users"] < 1:
            raise ConfigError(f"num_users={hp['num_users']}, num_items={hp['num_items']}: too few to train on")

    def describe(self, config):
        where = (f"on the device (inputs/ncf_device.py, {device_random(config)} random numbers)"
                 if builds_on_device(config.hparams["epoch_build"])
                 else "on the host's cores (inputs/ncf.py, NumPy's PCG64)")
        return [f"epoch build (negatives and shuffle): {where}"]

    def build_model(self, config):
        import keras

        from mlperf_keras.layers.embedding import Embedding

        hp = config.hparams
        builds_on_device(hp["epoch_build"])   # a bad value fails at start-up, not after the data is loaded
        if hp["mlp_layers"][0] % 2:
            raise ValueError("mlp_layers[0] is the concatenated user+item embedding width and must be even")
        # One stream for the whole build: Keras initializers given the same int seed repeat their values in every
        # layer (mf_item would equal mf_user's first rows); drawing from one SeedGenerator gives each its own.
        seeds = keras.random.SeedGenerator(config.seed)
        users = keras.Input(shape=(), dtype="int32", name="user")
        items = keras.Input(shape=(), dtype="int32", name="item")

        def embedding(count, dim, name):
            # Float32 lookups (layers/embedding.py): Keras' Embedding would sum a popular item's gradient in bf16.
            return Embedding(count, dim, name=name,
                             embeddings_initializer=keras.initializers.RandomNormal(stddev=0.01, seed=seeds))

        def dense(width, fan_in, kernel_initializer, **kwargs):
            # PyTorch's nn.Linear bias init, which neumf.py keeps: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
            bound = 1 / np.sqrt(fan_in)
            return keras.layers.Dense(width, kernel_initializer=kernel_initializer,
                                      bias_initializer=keras.initializers.RandomUniform(-bound, bound, seed=seeds),
                                      **kwargs)

        mf = keras.layers.Multiply(name="gmf")([
            embedding(hp["num_users"], hp["mf_dim"], "mf_user_embed")(users),
            embedding(hp["num_items"], hp["mf_dim"], "mf_item_embed")(items)])
        half = hp["mlp_layers"][0] // 2
        mlp = keras.layers.Concatenate(name="mlp_input")([
            embedding(hp["num_users"], half, "mlp_user_embed")(users),
            embedding(hp["num_items"], half, "mlp_item_embed")(items)])
        for i, width in enumerate(hp["mlp_layers"][1:]):
            mlp = dense(width, hp["mlp_layers"][i], keras.initializers.GlorotUniform(seed=seeds),
                        activation="relu", name=f"mlp_{i}")(mlp)
        both = keras.layers.Concatenate(name="neumf")([mf, mlp])
        logit = dense(1, hp["mlp_layers"][-1] + hp["mf_dim"], keras.initializers.LecunUniform(seed=seeds),
                      name="final", dtype="float32")(both)
        logit = keras.layers.Reshape((), name="logit", dtype="float32")(logit)  # a bf16 Reshape would round it
        return keras.Model({"user": users, "item": items}, logit, name="neumf")

    def build_optimizer(self, config, steps_per_epoch):
        import keras

        hp = config.hparams
        return keras.optimizers.Adam(learning_rate=hp["learning_rate"], beta_1=hp["beta_1"],
                                     beta_2=hp["beta_2"], epsilon=hp["epsilon"])

    def loss(self, y_true, y_pred):
        """Mean binary cross-entropy over the batch's real samples. Label PAD_LABEL marks the samples that only fill
        the epoch's last batch to a fixed shape (inputs/ncf.py): they weigh nothing, so each sample trains once per
        epoch and the last batch is the mean over what it really holds, as the reference's smaller last batch."""
        from keras import ops

        real = ops.greater_equal(y_true, 0)
        labels = ops.where(real, y_true, ops.zeros_like(y_true))
        bce = ops.binary_crossentropy(labels, ops.cast(y_pred, "float32"), from_logits=True)
        count = ops.sum(ops.cast(real, "float32"))
        return ops.sum(ops.where(real, bce, ops.zeros_like(bce))) / ops.maximum(count, 1.0)

    def steps_per_epoch(self, config, manifest):
        hp = config.hparams
        if manifest is None:
            per_worker = [hp["train_positives"] // config.num_workers] * config.num_workers
        else:
            files = [f for f in manifest["files"] if f["split"] == "train"]
            per_worker = [sum(f["rows"] for f in files[r::config.num_workers]) for r in range(config.num_workers)]
        return ncf_input.steps_per_epoch(per_worker, hp["negatives"], config.per_worker_batch_size)

    def train_data(self, config, dist, manifest):
        positives = self._train_positives(config, dist, manifest)
        return _NcfTrainData(config, positives, self.steps_per_epoch(config, manifest), dist.rank)

    def _train_positives(self, config, dist, manifest):
        """This worker's training (user, item) rows, loaded once for the train data and the evaluator."""
        key = (config.data_dir, dist.rank, dist.world_size)
        if getattr(self, "_positives", (None,))[0] != key:
            files = worker_shards(manifest, "train", dist.rank, dist.world_size)
            self._positives = (key, ncf_input.load_rows(config.data_dir, files, columns=2))
        return self._positives[1]

    def synthetic_train_data(self, config, dist):
        return _SyntheticNcfData(config, self.steps_per_epoch(config, None), dist.rank)

    def evaluator(self, config, dist, manifest):
        """The eval set of this worker's users. Built after run_start (the loop calls it on the clock), as the
        reference draws its eval negatives after run_start (data_prep/movielens.py holds only the test items)."""
        hp = config.hparams
        if manifest is None:
            users = np.arange(hp["num_users"] // dist.world_size, dtype=np.int32)
            test_items = np.random.default_rng([config.seed, 1, dist.rank]).integers(
                0, hp["num_items"], len(users), dtype=np.int32)
            positives = np.zeros((0, 2), np.int32)
            total = len(users) * dist.world_size
        else:
            files = worker_shards(manifest, "eval", dist.rank, dist.world_size)
            rows = ncf_input.load_rows(config.data_dir, files, columns=2)
            users, test_items = rows[:, 0], rows[:, 1]
            positives = self._train_positives(config, dist, manifest)
            total = manifest["counts"]["eval_users"]
        # A stream of its own (not the model init's SeedGenerator(seed)), from the run's seed and the worker's rank.
        seed = int(np.random.SeedSequence([config.seed, 1, dist.rank]).generate_state(1)[0] >> 1)
        negatives = ncf_input.draw_eval_negatives(users, positives, hp["num_items"], hp["eval_negatives"], seed)
        eval_set = ncf_input.EvalSet.build(users, test_items, negatives)
        return _HitRateEvaluator(eval_set, total, hp["top_k"], hp["eval_batch_size"], dist)

    def mllog_hparams(self, config):
        hp = config.hparams
        return {"opt_name": "adam", "opt_base_learning_rate": hp["learning_rate"],
                "opt_adam_beta_1": hp["beta_1"], "opt_adam_beta_2": hp["beta_2"],
                "opt_adam_epsilon": hp["epsilon"],
                "input_hp_num_neg": hp["negatives"], "eval_hp_num_neg": hp["eval_negatives"],
                "eval_hp_num_users": hp["num_users"],
                # mlperf_compliance 0.0.6's PREPROC_HP_SAMPLE_EVAL_REPLACEMENT, logged true by the reference
                "preproc_hp_sample_eval_replacement": True}


def builds_on_device(epoch_build: str) -> bool:
    if epoch_build not in ("auto", "device", "host"):
        raise ConfigError(f"epoch_build={epoch_build!r}: choose auto, device or host")
    if epoch_build == "auto":
        from mlperf_keras.steps import accelerator_present

        return accelerator_present()
    return epoch_build == "device"


def device_random(config) -> str:
    """The device epoch build's random numbers: the framework's stock generators in the closed division, the
    counter hash (not a stock generator) only in the open one (inputs/ncf_device.py)."""
    return "stock" if config.closed_division else "hash"


class _NcfTrainData(TrainData):
    def __init__(self, config, positives, steps, rank):
        hp = config.hparams
        if builds_on_device(hp["epoch_build"]):
            # An H200 trains an ml-20m epoch in about 0.5 s; the host needs seconds to build one (inputs/ncf_device.py).
            from mlperf_keras.inputs.ncf_device import DeviceTrainSampler

            # Closed: the framework's stock generators; the cheaper counter hash only under --division=open.
            self.sampler = DeviceTrainSampler(positives, hp["num_items"], hp["negatives"], config.seed, rank,
                                              random=device_random(config))
        else:
            # The epoch build is the input's whole cost: every core this worker can share (workers split a host).
            threads = max(1, len(os.sched_getaffinity(0)) // config.num_workers)
            self.sampler = ncf_input.TrainSampler(positives, hp["num_items"], hp["negatives"], config.seed, rank,
                                                  threads=threads)
        self.steps_per_epoch = steps
        self.samples_per_epoch = hp["train_positives"] * (1 + hp["negatives"])
        self.batch = config.per_worker_batch_size

    def batches(self, epoch):
        for (users, items), labels in self.sampler.batches(epoch, self.batch, self.steps_per_epoch):
            yield {"user": users, "item": items}, labels


class _SyntheticNcfData(TrainData):
    """Uniformly random (user, item, label) batches of the real shapes; no sampling cost."""

    def __init__(self, config, steps, rank):
        self.config, self.rank, self.steps_per_epoch = config, rank, steps
        self.samples_per_epoch = steps * config.global_batch_size

    def batches(self, epoch):
        hp, batch = self.config.hparams, self.config.per_worker_batch_size
        rng = np.random.default_rng([self.config.seed, epoch, self.rank])
        for _ in range(self.steps_per_epoch):
            users = rng.integers(0, hp["num_users"], batch, dtype=np.int32)
            items = rng.integers(0, hp["num_items"], batch, dtype=np.int32)
            labels = (rng.random(batch) < 1 / (1 + hp["negatives"])).astype(np.float32)
            yield {"user": users, "item": items}, labels


class _HitRateEvaluator(Evaluator):
    def __init__(self, eval_set, total_users, k, batch, dist):
        self.eval_set, self.num_samples, self.k, self.dist = eval_set, total_users, k, dist
        width = eval_set.items.shape[1]
        self.users_per_call = max(1, batch // width)

    def evaluate(self, predict):
        hits = 0
        for lo in range(0, self.eval_set.num_users, self.users_per_call):
            hi = min(lo + self.users_per_call, self.eval_set.num_users)
            users, items, width = self.eval_set.candidates(lo, hi)
            logits = predict({"user": users, "item": items}).reshape(hi - lo, width)
            # Ranked as float32 probabilities, as the reference ranks model(..., sigmoid=True): saturated
            # probabilities tie, and ties follow the reference's rule (metrics/ranking.py).
            with np.errstate(over="ignore"):
                scores = 1 / (1 + np.exp(-logits.astype(np.float32)))
            hits += hits_at_k(scores, self.k, self.eval_set.positive_column[lo:hi],
                              self.eval_set.duplicate[lo:hi])
        merged_hits, merged_users = self.dist.sum_across_workers([hits, self.eval_set.num_users])
        return float(merged_hits / merged_users)
