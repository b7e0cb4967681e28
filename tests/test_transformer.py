"""The Transformer workload: size, loss, schedule, the bucketed text pipeline, the BLEU evaluator, the MLLOG log."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import types

import numpy as np
import pytest

from mlperf_keras import distribute, loop
from mlperf_keras.inputs.manifest import worker_shards
from mlperf_keras.inputs import text
from mlperf_keras.workloads.transformer import Transformer, learning_rate_schedule, smoothed_cross_entropy
from tests.conftest import (ROOT, as_closed_division, assert_checker_fails_only_on_the_target, run_cli,
                            run_on_jax_without_tensorflow, train_values)
from tests.test_wmt_prep import prepared_corpus

# A tiny model: the closed division refuses it (compliance/tunable.py), so its runs are open.
TINY = ("d_model=32,num_layers=1,num_heads=4,filter_size=64,dropout=0.0,batch_tokens=512,max_length=32,"
        "boundary_scale=1.5,beam_size=2,extra_decode_length=4,eval_batch_size=32,shuffle_buffer=512")


def transformer_params(vocab, d, layers, filter_size):
    """Trainable parameters of the reference architecture, counted by hand."""
    attention = 4 * d * d
    ffn = d * filter_size + filter_size + filter_size * d + d
    norm = 2 * d
    encoder = layers * (attention + ffn + 2 * norm) + norm
    decoder = layers * (2 * attention + ffn + 3 * norm) + norm
    return vocab * d + encoder + decoder


def test_dry_run_prints_the_transformer_big_parameter_count():
    proc = run_cli("mlperf_keras.train", "--model=transformer", "--dry_run", "--ruleset=0.7")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert transformer_params(33_708, 1024, 6, 4096) == 210_804_736
    assert "parameters: 210804736" in proc.stdout
    assert "global batch: 4096 tokens (4096 per worker x 1 worker)" in proc.stdout


def test_small_model_has_the_hand_counted_parameters():
    workload = Transformer()
    hp = {**workload.reference_hparams("0.7"), "vocab_size": 50, "d_model": 16, "num_layers": 2, "num_heads": 2,
          "filter_size": 24}
    model = workload.build_model(types.SimpleNamespace(hparams=hp, seed=0))
    assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == transformer_params(50, 16, 2, 24)
    names = [w.path for w in model.trainable_weights]
    assert sum("embedding" in n for n in names) == 1  # one matrix: source, target and output projection


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_padding_is_masked_and_mixed_precision_does_not_overflow(policy):
    """Padding is invisible: the same sentence padded to 4 or to 8 source tokens gives the same target logits (with
    the encoder's padding mask left out they differ by about 0.6 at logits of about 3), and a source row that is all
    padding gives finite float32 logits under mixed precision (masked logits are -1e9 in float32, not in fp16)."""
    import keras

    workload = Transformer()
    hp = {**workload.reference_hparams("0.7"), "vocab_size": 30, "d_model": 16, "num_layers": 1, "num_heads": 2,
          "filter_size": 32}
    keras.config.set_dtype_policy(policy)
    try:
        model = workload.build_model(types.SimpleNamespace(hparams=hp, seed=0))
        target = np.array([[2, 7, 9, 1]], np.int32)
        short, long = (np.asarray(model({"source": np.array([[5, 6, 1] + [0] * pad], np.int32),
                                         "target_input": target}, training=False)) for pad in (1, 5))
        source = np.array([[5, 6, 1, 0], [0, 0, 0, 0]], np.int32)  # the second row is an empty (padding) row
        logits = np.asarray(model({"source": source, "target_input": source}, training=False))
    finally:
        keras.config.set_dtype_policy("float32")
    np.testing.assert_allclose(short, long, atol=1e-2)
    assert logits.dtype == np.float32 and np.isfinite(logits).all()


def numpy_smoothed_loss(targets, logits, eps):
    vocab = logits.shape[-1]
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    soft = np.full(logits.shape, eps / (vocab - 1))
    np.put_along_axis(soft, targets[..., None], 1 - eps, axis=-1)
    xent = -(soft * logp).sum(-1) + (soft * np.log(soft)).sum(-1)  # KL to the smoothed target: 0 at best
    weights = targets != 0
    return (xent * weights).sum() / weights.sum()


def test_label_smoothed_loss_matches_numpy_and_ignores_padding():
    rng = np.random.default_rng(0)
    targets = rng.integers(1, 11, size=(3, 5))
    targets[0, 3:] = 0
    targets[2, 1:] = 0
    logits = rng.normal(size=(3, 5, 11)).astype(np.float32) * 3
    got = float(smoothed_cross_entropy(targets, logits, 0.1, 11))
    assert got == pytest.approx(numpy_smoothed_loss(targets, logits, 0.1), rel=1e-5)
    changed = logits.copy()
    changed[targets == 0] = 100.0  # whatever the model says at padding positions costs nothing
    assert float(smoothed_cross_entropy(targets, changed, 0.1, 11)) == pytest.approx(got, rel=1e-6)
    best = np.log(np.where(np.eye(11)[targets] > 0, 0.9, 0.01)).astype(np.float32)  # the smoothed target itself
    assert float(smoothed_cross_entropy(targets, best, 0.1, 11)) == pytest.approx(0.0, abs=1e-5)


def test_learning_rate_is_the_reference_rsqrt_warmup():
    schedule = learning_rate_schedule(2.0, 1024, 16000)
    for step in (0, 1, 8000, 16000, 64000):
        want = 2.0 * 1024 ** -0.5 * min(1.0, step / 16000) / np.sqrt(max(step, 16000))
        assert float(schedule(step)) == pytest.approx(want, rel=1e-6)


# -- the text pipeline ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def copy_data(tmp_path_factory):
    return prepared_corpus(tmp_path_factory, task="copy", num_pairs=2000, num_test=60)


def manifest_of(data_dir):
    return json.load(open(f"{data_dir}/manifest.json"))


def test_bucket_plan_follows_the_reference_boundaries():
    plan = text.BucketPlan.create(4096, 256)
    assert plan.lengths[:6] == (8, 9, 10, 11, 12, 13) and plan.lengths[-1] == 256 and len(plan.lengths) == 42
    assert all(size * length <= 4096 for size, length in zip(plan.batch_sizes, plan.lengths))
    assert plan.batch_sizes[0] == 512 and plan.batch_sizes[-1] == 16 and all(s % 8 == 0 for s in plan.batch_sizes)
    hist = np.zeros(257, np.int64)
    hist[[5, 8, 9, 256]] = [600, 100, 1, 17]
    assert list(plan.bucket_counts(hist)[[0, 1, -1]]) == [700, 1, 17]
    assert plan.steps(hist) == 2 + 1 + 2
    from mlperf_keras.config import ConfigError

    with pytest.raises(ConfigError, match="cannot hold one pair of max_length 256"):
        text.BucketPlan.create(200, 256)


def test_pipeline_gives_exactly_the_planned_batches_within_the_token_budget(copy_data):
    manifest = manifest_of(copy_data)
    plan = text.BucketPlan.create(512, 32, 8, 1.5)
    hist = text.worker_length_histogram(manifest, 0, 1)
    steps = plan.steps(hist)
    files = [f"{copy_data}/{f['name']}" for f in worker_shards(manifest, "train", 0, 1)]
    pipeline = text.TrainPipeline(files, plan, 32, steps + 5, shuffle_buffer=256, seed=1, as_numpy=True)
    batches = list(pipeline.batches(0))
    # the histogram predicts the data's batches exactly; the epoch's other steps are empty batches (no pair)
    assert len(batches) == steps + 5 and all(not y.any() for _, y in batches[steps:])
    assert all(y.any() for _, y in batches[:steps])
    batches = batches[:steps]
    shapes = set(zip(plan.batch_sizes, plan.lengths))
    pairs = 0
    for x, y in batches:
        assert (y.shape[0], y.shape[1]) in shapes and x["source"].shape == y.shape == x["target_input"].shape
        assert y.size <= 512
        np.testing.assert_array_equal(x["target_input"][:, 1:], y[:, :-1])
        assert not x["target_input"][:, 0].any()
        pairs += int((y[:, 0] != 0).sum())
    assert pairs == manifest["counts"]["train_pairs"]
    fraction, real = text.padding_fraction(batches)
    # the copy corpus has equal side lengths, so all padding is the longer side's, as the histogram predicts
    assert 0.0 < fraction < 0.5 and fraction == pytest.approx(plan.padding_fraction(hist), abs=1e-9)
    again = list(text.TrainPipeline(files, plan, 32, steps, 256, seed=1, as_numpy=True).batches(0))
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(batches, again))  # deterministic for a seed and epoch
    other = list(text.TrainPipeline(files, plan, 32, steps, 256, seed=1, as_numpy=True).batches(1))
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(batches, other) if a[1].shape == b[1].shape)


def test_workers_read_disjoint_shards_and_the_same_number_of_steps(copy_data):
    manifest = manifest_of(copy_data)
    names = [[f["name"] for f in worker_shards(manifest, "train", r, 2)] for r in range(2)]
    assert not set(names[0]) & set(names[1]) and len(names[0] + names[1]) == 4
    workload = Transformer()
    config = types.SimpleNamespace(hparams={**workload.reference_hparams("0.7"), "max_length": 32,
                                            "boundary_scale": 1.5}, per_worker_batch_size=512, num_workers=2)
    plan = workload.bucket_plan(config)
    per_worker = [plan.steps(text.worker_length_histogram(manifest, r, 2)) for r in range(2)]
    assert workload.steps_per_epoch(config, manifest) == max(per_worker)


def real_pairs(batches):
    """(source, target) id tuples of the non-empty rows of (x, y) batches (a real target holds at least EOS)."""
    out = []
    for x, y in batches:
        for s, t in zip(np.asarray(x["source"]), np.asarray(y)):
            if t[0] != 0:
                out.append((tuple(int(v) for v in s[s != 0]), tuple(int(v) for v in t[t != 0])))
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_every_pair_once_per_epoch_when_shards_do_not_divide_evenly(copy_data, workers):
    """3 shards on 2 workers (2 + 1): the epoch has the larger worker's steps and the other pads with empty
    batches; over all workers every pair of the shards appears exactly once, and empty batches weigh nothing."""
    import collections

    import tensorflow as tf

    manifest = manifest_of(copy_data)
    train = [f for f in manifest["files"] if f["split"] == "train"][:3]
    manifest = {**manifest, "files": [f for f in manifest["files"] if f["split"] != "train"] + train,
                "counts": {**manifest["counts"], "train_pairs": sum(f["rows"] for f in train)}}
    expected = collections.Counter(
        (tuple(s.tolist()), tuple(t.tolist())) for f in train
        for s, t in tf.data.TFRecordDataset(f"{copy_data}/{f['name']}").map(text.parse_pair).as_numpy_iterator())
    workload = Transformer()
    config = types.SimpleNamespace(hparams={**workload.reference_hparams("0.7"), "max_length": 32,
                                            "boundary_scale": 1.5, "shuffle_buffer": 64},
                                   per_worker_batch_size=512, num_workers=workers, data_dir=copy_data, seed=3,
                                   backend="tensorflow")
    steps = workload.steps_per_epoch(config, manifest)
    seen, empty_batches = collections.Counter(), 0
    for rank in range(workers):
        data = workload.train_data(config, types.SimpleNamespace(rank=rank, world_size=workers), manifest)
        batches = list(data.batches(0))
        assert len(batches) == steps == data.steps_per_epoch
        seen.update(real_pairs(batches))
        empty_batches += sum(1 for _, y in batches if not np.asarray(y).any())
    assert seen == expected and sum(seen.values()) == manifest["counts"]["train_pairs"]
    if workers == 2:  # the two workers' shares differ, so one of them padded its epoch
        per_worker = [workload.bucket_plan(config).steps(text.worker_length_histogram(manifest, r, 2))
                      for r in range(2)]
        assert empty_batches == abs(per_worker[0] - per_worker[1]) > 0
    logits = np.random.default_rng(0).normal(size=(4, 8, 30)).astype(np.float32)
    assert float(smoothed_cross_entropy(np.zeros((4, 8), np.int32), logits, 0.1, 30)) == 0.0


def test_synthetic_batches_have_the_real_shapes_without_tensorflow():
    code = ("import sys; from mlperf_keras.inputs import text; p = text.BucketPlan.create(4096, 256); "
            "s = text.SyntheticTextBatches(p, 33708, 256, 100000, 50, 0); b = list(s.batches(0)); "
            "assert len(b) == 50 and all((y.shape[0], y.shape[1]) in set(zip(p.batch_sizes, p.lengths)) for _, y in b);"
            "assert all((y[:, 0] != 0).all() and (y == 1).sum() == y.shape[0] for _, y in b);"
            "assert 'tensorflow' not in sys.modules; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


# -- evaluation -----------------------------------------------------------------------------------------------------

class FakeWorkers:
    def __init__(self, rank, world_size, shares):
        self.rank, self.world_size, self.shares = rank, world_size, shares

    def sum_across_workers(self, values):
        self.shares.append(np.asarray(values, dtype=np.float64))
        return np.sum(self.shares, axis=0)


class CopyTranslator:
    """Stands in for beam search: 'translates' by copying the source (the copy corpus' exact answer)."""
    calls = []

    def __init__(self, model, beam_size, alpha, extra_length, eos_id, jit_compile):
        self.extra = extra_length

    def __call__(self, source):
        CopyTranslator.calls.append(source.shape)
        return np.concatenate([source, np.zeros((source.shape[0], self.extra), np.int32)], axis=1)


def test_evaluator_splits_the_test_set_and_merges_bleu_exactly(copy_data, monkeypatch):
    import mlperf_keras.decoding

    monkeypatch.setattr(mlperf_keras.decoding, "Translator", CopyTranslator)
    workload = Transformer()
    workload.model = None
    manifest = manifest_of(copy_data)
    config = types.SimpleNamespace(hparams={**workload.reference_hparams("0.7"), "eval_batch_size": 16},
                                   jit_compile=False, data_dir=copy_data, backend="tensorflow")
    single = workload.evaluator(config, distribute.SingleProcess(), manifest)
    assert single.num_samples == 60 and len(single.sources) == 60
    assert single.evaluate(None) == pytest.approx(100.0)  # the references against themselves, whole eval path
    assert all(shape[0] == 16 for shape in CopyTranslator.calls)  # fixed batch rows, padded with empty rows
    shares = []
    workers = [workload.evaluator(config, FakeWorkers(r, 3, shares), manifest) for r in range(3)]
    assert sorted(sum((list(w.references) for w in workers), [])) == sorted(single.references)
    for w in workers[:2]:
        w.evaluate(None)
    assert workers[2].evaluate(None) == pytest.approx(100.0)  # the last one sees the sum of all three


# -- a short run: every MLLOG key the 0.7.0 transformer rules demand ------------------------------------------------

def test_short_run_log_fails_the_official_checker_only_on_the_quality_target(copy_data, tmp_path):
    from mlperf_keras import train as train_cli

    values = train_values(model="transformer", data_dir=copy_data, output_dir=str(tmp_path), seed=5, ruleset="0.7",
                          max_epochs=1, jit_compile=False, hparams=TINY + ",learning_rate=0.01",
                          division="open")
    dist = distribute.create("tensorflow")
    workload, manifest, config = train_cli.resolve(values, dist, say=lambda _: None)
    result = loop.run(config, workload, dist, manifest)
    assert result.status == "aborted" and result.quality < 25.0
    events = [json.loads(line[len(":::MLLOG "):]) for line in open(result.log_path)]
    by_key = {e["key"]: e for e in events}
    assert by_key["max_sequence_length"]["value"] == 32
    assert by_key["max_sequence_length"]["metadata"]["method"] == "discard"
    assert by_key["opt_adam_epsilon"]["value"] == 1e-9 and by_key["opt_adam_beta_2"]["value"] == 0.997
    assert by_key["eval_accuracy"]["value"] == pytest.approx(result.quality / 100)  # a fraction from v0.7
    assert by_key["train_samples"]["value"] == manifest["counts"]["train_pairs"]
    assert by_key["eval_samples"]["value"] == 60 and by_key["global_batch_size"]["value"] == 512

    # the same log with BLEU at the target passes every rule: the target is the only thing missing
    assert_checker_fails_only_on_the_target(
        as_closed_division(result.log_path, tmp_path), "0.7.0",
        "Failed checks for eval_accuracy : v['value'] >= 0.2500 and v['value'] < 1",
        by_key["eval_accuracy"]["value"], 0.26, tmp_path)


def test_synthetic_jax_run_decodes_and_never_imports_tensorflow(tmp_path):
    lines, check = run_on_jax_without_tensorflow(
        "train", ["--model=transformer", "--backend=jax", "--synthetic", f"--output_dir={tmp_path}", "--seed=2",
                  "--max_epochs=1", "--ruleset=0.7", f"--hparams={TINY},vocab_size=40,train_pairs=300,eval_sentences=24",
                  "--division=open"],
        tmp_path, timeout=300)
    summary = json.loads(lines[-1])
    assert check == {"exit": 5, "tensorflow_imported": False}   # stopped at --max_epochs without the target
    assert summary["epochs"] == 1 and 0.0 <= summary["quality"] < 5.0  # random references: BLEU near 0
    log = open(summary["log"]).read()
    assert '"key": "eval_accuracy"' in log and '"key": "keras_backend", "value": "jax"' in log


def test_config_is_recorded_with_the_transformer_defaults(tmp_path):
    from mlperf_keras import train as train_cli

    values = train_values(model="transformer", synthetic=True, output_dir=str(tmp_path), seed=1, ruleset="0.7")
    _, _, config = train_cli.resolve(values, distribute.SingleProcess(), say=lambda _: None)
    hp = config.hparams
    assert (hp["d_model"], hp["num_layers"], hp["num_heads"], hp["filter_size"]) == (1024, 6, 16, 4096)
    assert (hp["beam_size"], hp["alpha"], hp["label_smoothing"], hp["dropout"]) == (4, 0.6, 0.1, 0.1)
    assert (hp["beta_1"], hp["beta_2"], hp["epsilon"], hp["learning_rate"]) == (0.9, 0.997, 1e-9, 2.0)
    assert config.global_batch_size == 4096 and config.quality_target == 25.0
    assert dataclasses.asdict(config.system)["platform"]


@pytest.mark.slow
def test_reduced_transformer_learns_to_reverse_sentences(tmp_path_factory, tmp_path):
    """A WMT-format corpus whose German side is the English words in reverse order: a 2+2-layer Transformer
    learns it to a high BLEU in a few CPU minutes (about 7 epochs of 132 steps, ~1.5 min on 2 cores)."""
    from mlperf_keras import train as train_cli

    data = prepared_corpus(tmp_path_factory, task="reverse", num_pairs=6000, num_test=100)
    hparams = ("d_model=64,num_layers=2,num_heads=4,filter_size=128,dropout=0.0,warmup_steps=200,learning_rate=1.0,"
               "batch_tokens=1024,max_length=32,boundary_scale=1.5,beam_size=2,extra_decode_length=5,"
               "shuffle_buffer=2048")
    values = train_values(model="transformer", data_dir=data, output_dir=str(tmp_path), seed=1, ruleset="0.7",
                          max_epochs=20, jit_compile=False, hparams=hparams, division="open")
    dist = distribute.create("tensorflow")
    workload, manifest, config = train_cli.resolve(values, dist, say=lambda _: None)
    result = loop.run(dataclasses.replace(config, quality_target=85.0), workload, dist, manifest)
    assert result.status == "success" and result.quality >= 85.0, result
    events = [json.loads(line[len(":::MLLOG "):]) for line in open(result.log_path)]
    assert events[-1]["key"] == "run_stop" and events[-1]["metadata"]["status"] == "success"


def test_closed_division_uses_stock_dropout_and_the_reference_vocabulary():
    from mlperf_keras.config import ConfigError
    from mlperf_keras.layers.dropout import Dropout

    workload = Transformer()
    hp = {**workload.reference_hparams("0.7"), "vocab_size": 30, "d_model": 16, "num_layers": 1, "num_heads": 2,
          "filter_size": 32}

    def config(closed, **overrides):
        return types.SimpleNamespace(hparams={**hp, **overrides}, seed=0, backend="tensorflow", closed_division=closed,
                                     data_dir="D")

    def generators(model):
        return {layer.generator for layer in model._flatten_layers() if isinstance(layer, Dropout)}

    subword_manifest = {"options": {"tokenizer": "subword"}}
    workload.check(config(True), subword_manifest)
    assert hp["dropout_rng"] == "keras" and generators(workload.build_model(config(True))) == {"keras"}
    with pytest.raises(ConfigError, match="not a framework random generator.*--division=open"):
        workload.check(config(True, dropout_rng="hash"), subword_manifest)
    workload.check(config(False, dropout_rng="hash"), subword_manifest)
    assert generators(workload.build_model(config(False, dropout_rng="hash"))) == {"hash"}
    with pytest.raises(ConfigError, match="JAX backend only"):
        workload.check(config(True, dropout_rng="rbg"), subword_manifest)
    with pytest.raises(ConfigError, match="prepared with a sentencepiece vocabulary.*--division=open"):
        workload.check(config(True), {"options": {"tokenizer": "sentencepiece"}})
    workload.check(config(False), {"options": {"tokenizer": "sentencepiece"}})
