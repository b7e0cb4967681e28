"""SSD300-ResNet34: the model's size, shapes and box order; the multibox loss; the pretrained-backbone converter and
loader."""
from __future__ import annotations

import json
import subprocess
import sys

import keras
import numpy as np
import pytest

from data_prep import ssd_backbone
from mlperf_keras.config import ConfigError
from mlperf_keras.inputs import default_boxes
from mlperf_keras.inputs.manifest import DataError
from mlperf_keras.layers import ssd
from tests.conftest import ROOT, run_cli

TINY = 8   # width: every channel count / 8; same structure, fast on CPU


@pytest.fixture(scope="module")
def full_model():
    return ssd.ssd300()


@pytest.fixture(scope="module")
def tiny_model():
    keras.utils.set_random_seed(1)
    return ssd.ssd300(width=TINY)


def count(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


# ---- the model ----

def test_parameter_count_is_the_references(full_model):
    # Trainable parameters as torch counts them (conv weights and biases, batch-norm weight and bias):
    # torchvision ResNet-34 has 21,797,672; SSD keeps conv1..layer3 and drops layer4 and fc:
    #   layer4: block 1 3*3*256*512 + 3*3*512*512 + 1*1*256*512 + 3 BN x 2*512 = 3,673,088,
    #           blocks 2-3 2 x (2*3*3*512*512 + 2 BN x 2*512) = 9,441,280              -> 13,114,368
    #   fc: 512*1000 + 1000 = 513,000
    #   backbone: 21,797,672 - 13,114,368 - 513,000 = 8,170,304
    #   (= conv1 9,408 + bn1 128 + layer1 221,952 + layer2 1,116,416 + layer3 6,822,400)
    # extras (1x1 conv with bias, ReLU, 3x3 conv with bias, ReLU; no batch norm: the reference's
    # _build_additional_features at mlcommons/training 0badcd1, d99c36dc and f9e0e82d):
    #   256->256->512: 65,536 + 256 + 1,179,648 + 512 = 1,245,952
    #   512->256->512: 131,072 + 256 + 1,179,648 + 512 = 1,311,488
    #   512->128->256: 65,536 + 128 + 294,912 + 256 = 360,832
    #   256->128->256 (twice): 32,768 + 128 + 294,912 + 256 = 328,064 each           -> 3,574,400
    # heads (3x3 with bias, 4 + 81 = 85 channels per box): (9 * in + 1) * boxes * 85 for
    #   (256, 4) 783,700; (512, 6) 2,350,590; (512, 6) 2,350,590; (256, 6) 1,175,550; (256, 4) 783,700 twice
    #                                                                                  -> 8,227,830
    # total 8,170,304 + 3,574,400 + 8,227,830 = 19,972,534
    # (with the batch norm the extras once had, and bias-free convolutions: 19,975,222)
    assert count(full_model.trainable_variables) == 19_972_534
    assert count(v for v in ssd.backbone_variables(full_model).values() if v.trainable) == 8_170_304
    # The batch norms' moving mean and variance are the only other variables (buffers, not parameters, in torch);
    # every batch norm is the backbone's.
    norms = [layer for layer in full_model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert norms and all(layer.name.startswith(ssd.BACKBONE_PREFIXES) for layer in norms)
    assert count(full_model.non_trainable_variables) == 2 * sum(layer.gamma.shape[0] for layer in norms)


def test_output_shapes_dtypes_and_feature_maps(full_model):
    loc, logits = full_model.outputs
    assert tuple(loc.shape) == (None, 8732, 4) and tuple(logits.shape) == (None, 8732, 81)
    assert loc.dtype == "float32" and logits.dtype == "float32"
    assert full_model.input.dtype == "uint8" and tuple(full_model.input.shape) == (None, 300, 300, 3)
    maps = [tuple(full_model.get_layer(f"loc{k}").input.shape[1:]) for k in range(1, 7)]
    assert maps == [(38, 38, 256), (19, 19, 512), (10, 10, 512), (5, 5, 256), (3, 3, 256), (1, 1, 256)]
    heads = [(full_model.get_layer(f"loc{k}").filters, full_model.get_layer(f"conf{k}").filters) for k in range(1, 7)]
    assert heads == [(4 * b, 81 * b) for b in (4, 6, 6, 6, 4, 4)]


def test_backbone_is_torchvision_resnet34_to_layer3(full_model):
    # layer3's first block at stride 1 (conv1 and downsample): 38x38 out of layer2's 38x38.
    assert full_model.get_layer("stage2_block4_out").output.shape[1:] == (38, 38, 128)
    assert full_model.get_layer("stage3_block1_1_conv").strides == (1, 1)
    assert full_model.get_layer("stage3_block1_proj_conv").strides == (1, 1)
    assert full_model.get_layer("stage3_block6_out").output.shape[1:] == (38, 38, 256)
    assert full_model.get_layer("stem_pool").output.shape[1:] == (75, 75, 64)
    names = {layer.name for layer in full_model.layers}
    assert "stage3_block7_out" not in names and not any(n.startswith("stage4") for n in names)
    bn = full_model.get_layer("stage3_block6_2_bn")
    assert bn.epsilon == 1e-5 and bn.momentum == 0.9
    norm = full_model.get_layer("normalize")
    np.testing.assert_allclose(norm.mean, [123.675, 116.28, 103.53])
    np.testing.assert_allclose(norm.std, [58.395, 57.12, 57.375])


def test_initialisation_is_the_references(full_model):
    # Xavier-uniform kernels on extras and heads: bounded by sqrt(6 / (fan_in + fan_out)) and filling that range.
    for name in ("extra2_2_conv", "loc2", "conf1"):
        kernel = keras.ops.convert_to_numpy(full_model.get_layer(name).kernel)
        kh, kw, cin, cout = kernel.shape
        limit = np.sqrt(6.0 / ((cin + cout) * kh * kw))
        assert 0.95 * limit < np.abs(kernel).max() <= limit * (1 + 1e-6)   # float32 may round up to the bound
        assert abs(kernel.std() - limit / np.sqrt(3)) < 0.05 * limit
    # Biases (heads and extras) keep torch's Conv2d default U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    for name, fan_in in (("conf3", 9 * 512), ("extra1_1_conv", 256), ("extra2_2_conv", 9 * 256)):
        bias = keras.ops.convert_to_numpy(full_model.get_layer(name).bias)
        bound = 1 / np.sqrt(fan_in)
        assert 0.9 * bound < np.abs(bias).max() <= bound * (1 + 1e-6), name


def test_tiny_model_runs_forward(tiny_model):
    images = np.random.default_rng(0).integers(0, 256, (2, 300, 300, 3), dtype=np.uint8)
    loc, logits = tiny_model(images, training=False)
    assert loc.shape == (2, 8732, 4) and logits.shape == (2, 8732, 81)
    assert np.isfinite(keras.ops.convert_to_numpy(logits)).all()


def test_mixed_precision_keeps_float32_outputs():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = ssd.ssd300(width=TINY)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert model.get_layer("stage1_block1_1_conv").compute_dtype == "bfloat16"
    # Heads compute in bf16 under mixed precision (the reference is float32 throughout); their flattened outputs are
    # float32.
    assert all(model.get_layer(f"{h}{k}").compute_dtype == "bfloat16" for h in ("loc", "conf") for k in range(1, 7))
    assert all(model.get_layer(f"{h}{k}_flat").compute_dtype == "float32" for h in ("loc", "conf") for k in range(1, 7))
    loc, logits = model(np.zeros((1, 300, 300, 3), np.uint8))
    assert loc.dtype == "float32" and logits.dtype == "float32"


def expected_default_box(spec, k, i, j, b):
    """The default box of cell (i, j), size b on map k, from the spec alone (xywh, clipped)."""
    fk = spec.fig_size / spec.steps[k]
    s1, s2 = spec.scales[k] / spec.fig_size, spec.scales[k + 1] / spec.fig_size
    sizes = [(s1, s1), (np.sqrt(s1 * s2),) * 2]
    for a in spec.aspect_ratios[k]:
        sizes += [(s1 * np.sqrt(a), s1 / np.sqrt(a)), (s1 / np.sqrt(a), s1 * np.sqrt(a))]
    return np.clip([(j + 0.5) / fk, (i + 0.5) / fk, *sizes[b]], 0, 1)


def test_head_outputs_pair_with_default_boxes_in_order(tiny_model):
    """Feed each head's output a value naming (map, row, column, box, channel) and follow it through the model's own
    reshapes and concatenation: output box n must carry the cell and size of default box n."""
    spec, dboxes = default_boxes.SSD300, default_boxes.default_boxes()
    for head, per_box in (("loc", 4), ("conf", 81)):
        heads = [tiny_model.get_layer(f"{head}{k}").output for k in range(1, 7)]
        tail = keras.Model(heads, tiny_model.get_layer("loc" if head == "loc" else "logits").output)
        # Values stay below 2**24 so float32 heads carry them exactly: (row, column, channel) in one pass, the map
        # in another.
        cells, maps = [], []
        for k, size in enumerate(spec.feat_size):
            i, j, ch = np.meshgrid(np.arange(size), np.arange(size), np.arange(heads[k].shape[-1]), indexing="ij")
            cells.append(((i * 64 + j) * 1000 + ch)[None].astype(np.float32))
            maps.append(np.full_like(cells[-1], k))
        out = keras.ops.convert_to_numpy(tail(cells))[0].astype(np.int64)                  # [8732, per_box]
        k = keras.ops.convert_to_numpy(tail(maps))[0].astype(np.int64)
        assert out.shape == (8732, per_box)
        i, j, ch = out // 64_000, out // 1000 % 64, out % 1000
        assert (k == k[:, :1]).all() and (i == i[:, :1]).all() and (j == j[:, :1]).all()
        box, coord = ch // per_box, ch % per_box
        assert (box == box[:, :1]).all() and (coord == np.arange(per_box)).all()
        expected = np.array([expected_default_box(spec, *cell)
                             for cell in zip(k[:, 0], i[:, 0], j[:, 0], box[:, 0])])
        np.testing.assert_allclose(dboxes, expected, atol=1e-6)


# ---- the loss ----

def reference_loss(offsets, labels, loc, logits):
    """The reference Loss.forward in NumPy, image by image (float64)."""
    losses = []
    for off, lab, pl, lg in zip(offsets, labels, loc, logits):
        pos = lab > 0
        d = np.abs(pl - off)
        sl1 = (np.where(d < 1, 0.5 * d * d, d - 0.5).sum(-1) * pos).sum()
        lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
        con = lse - lg[np.arange(len(lab)), lab]
        con_neg = np.where(pos, 0.0, con)
        rank = np.empty(len(lab), int)
        rank[np.argsort(-con_neg, kind="stable")] = np.arange(len(lab))
        neg = rank < min(3 * pos.sum(), len(lab))
        closs = (con * (pos.astype(float) + neg.astype(float))).sum()   # a mined positive counts twice
        losses.append((sl1 + closs) / pos.sum() if pos.sum() else 0.0)
    return float(np.mean(losses))


def random_batch(seed, positives=(3, 0, 20), boxes=50, classes=5):
    rng = np.random.default_rng(seed)
    n = len(positives)
    labels = np.zeros((n, boxes), np.int32)
    for b, p in enumerate(positives):
        labels[b, rng.choice(boxes, p, replace=False)] = rng.integers(1, classes, p)
    offsets = rng.normal(0, 1.5, (n, boxes, 4)).astype(np.float32)
    loc = rng.normal(0, 1.5, (n, boxes, 4)).astype(np.float32)
    logits = rng.normal(0, 2, (n, boxes, classes)).astype(np.float32)
    return offsets, labels, loc, logits


def loss_value(offsets, labels, loc, logits):
    return float(keras.ops.convert_to_numpy(ssd.multibox_loss((offsets, labels), (loc, logits))))


def test_loss_matches_a_numpy_reference():
    # Image 2 has 20 positives of 50 boxes: 3 x 20 > 50, so every box is "mined", positives counted twice.
    for seed in range(3):
        batch = random_batch(seed)
        assert loss_value(*batch) == pytest.approx(reference_loss(*batch), rel=1e-5)


def test_loss_mines_tied_negatives_in_box_order():
    """Quantised logits give many equal cross-entropies: the mined set must be the first k of a stable descending
    sort (what the single-sort threshold in multibox_loss claims to reproduce), checked against the NumPy reference.
    A positive's own cross-entropy differs from its 0 in the ranking, so ties with positives matter too."""
    for seed in range(4):
        offsets, labels, loc, logits = random_batch(seed, positives=(3, 1, 7, 12), boxes=40)
        logits = np.round(logits) * 0.5          # few distinct logit rows: heavy ties among negatives
        logits[1, :20] = 30.0 * (np.arange(5) == 0)   # near-zero (or zero) CE on background: ties with positives' 0
        assert loss_value(offsets, labels, loc, logits) == pytest.approx(
            reference_loss(offsets, labels, loc, logits), rel=1e-5)


def ce(logits, label):
    return float(np.log(np.exp(logits).sum()) - logits[label])


def test_loss_by_hand_positive_and_mined_counts():
    # 12 boxes, 3 classes, box 0 positive (class 2): the 3 negatives of highest cross-entropy are mined.
    labels = np.zeros((1, 12), np.int32)
    labels[0, 0] = 2
    offsets = np.zeros((1, 12, 4), np.float32)
    loc = np.zeros((1, 12, 4), np.float32)
    loc[0, 0] = [0.5, -2.0, 0.0, 0.25]         # smooth L1: 0.125 + 1.5 + 0 + 0.03125
    loc[0, 5] = [9.0, 9.0, 9.0, 9.0]           # a negative's offsets never count
    logits = np.zeros((1, 12, 3), np.float32)
    logits[0, :, 1] = np.arange(12) * 0.3      # negatives' cross-entropy rises with the index
    logits[0, 0] = [0.0, 1.0, 2.0]
    box = 0.125 + 1.5 + 0.03125
    ces = [ce(logits[0, b], labels[0, b]) for b in range(12)]
    expected = box + ces[0] + ces[11] + ces[10] + ces[9]
    assert loss_value(offsets, labels, loc, logits) == pytest.approx(expected, rel=1e-6)

    # Two positives (boxes 0 and 11, averaged): now 6 negatives, the highest remaining are 10..5.
    labels[0, 11] = 1
    ces = [ce(logits[0, b], labels[0, b]) for b in range(12)]
    expected = (box + ces[0] + ces[11] + sum(ces[5:11])) / 2
    assert loss_value(offsets, labels, loc, logits) == pytest.approx(expected, rel=1e-6)


def test_loss_without_positives_is_zero_and_averages_over_the_batch():
    offsets, labels, loc, logits = random_batch(4, positives=(0,))
    logits *= 50                                           # large losses, still exactly 0 without positives
    assert loss_value(offsets, labels, loc, logits) == 0.0
    batch = random_batch(5, positives=(4, 0))
    alone = loss_value(*(a[:1] for a in batch))
    assert alone > 0 and loss_value(*batch) == pytest.approx(alone / 2, rel=1e-6)


def test_loss_negatives_capped_at_the_box_count():
    # 4 boxes, 2 positives: min(6, 4) = 4 "negatives", i.e. every box, so the positives' cross-entropy counts twice.
    labels = np.array([[1, 0, 2, 0]], np.int32)
    logits = np.random.default_rng(0).normal(size=(1, 4, 3)).astype(np.float32)
    zeros = np.zeros((1, 4, 4), np.float32)
    ces = [ce(logits[0, b], labels[0, b]) for b in range(4)]
    assert loss_value(zeros, labels, zeros, logits) == pytest.approx((2 * ces[0] + 2 * ces[2] + ces[1] + ces[3]) / 2,
                                                                      rel=1e-6)


def test_loss_gradients_reach_only_counted_boxes():
    import tensorflow as tf

    offsets, labels, loc, logits = random_batch(6, positives=(2,), boxes=30)
    loc_v, logits_v = tf.Variable(loc), tf.Variable(logits)
    with tf.GradientTape() as tape:
        loss = ssd.multibox_loss((offsets, labels), (loc_v, logits_v))
    g_loc, g_logits = (g.numpy() for g in tape.gradient(loss, [loc_v, logits_v]))
    pos = labels[0] > 0
    con = np.log(np.exp(logits[0]).sum(-1)) - logits[0][np.arange(30), labels[0]]
    mined = np.zeros(30, bool)
    mined[np.argsort(-np.where(pos, 0, con))[:6]] = True
    assert (np.abs(g_loc[0]).sum(-1) > 0).tolist() == pos.tolist()
    assert (np.abs(g_logits[0]).sum(-1) > 0).tolist() == (pos | mined).tolist()


def test_loss_compiles_with_xla_on_tensorflow():
    import tensorflow as tf

    batch = random_batch(7, positives=(5, 0, 1), boxes=200, classes=81)
    compiled = tf.function(lambda o, l, p, c: ssd.multibox_loss((o, l), (p, c)), jit_compile=True)
    assert float(compiled(*batch)) == pytest.approx(reference_loss(*batch), rel=1e-5)


JAX_LOSS = """
import json, sys
import numpy as np
import jax
from mlperf_keras.layers import ssd
data = np.load(sys.argv[1])
batch = [data[k] for k in ("offsets", "labels", "loc", "logits")]
def loss(loc, logits, offsets, labels):
    return ssd.multibox_loss((offsets, labels), (loc, logits))
value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(batch[2], batch[3], batch[0], batch[1])
print(json.dumps({"loss": float(value), "grads_finite": bool(all(np.isfinite(g).all() for g in grads)),
                  "tensorflow_imported": "tensorflow" in sys.modules}))
"""

JAX_MODEL = """
import json, sys
import numpy as np
import jax
from mlperf_keras.layers import ssd
model = ssd.ssd300(width=8)
out = jax.jit(lambda x: model(x, training=False))(np.zeros((1, 300, 300, 3), np.uint8))
print(json.dumps({"shapes": [list(o.shape) for o in out], "dtypes": [str(o.dtype) for o in out],
                  "tensorflow_imported": "tensorflow" in sys.modules}))
"""


def run_on_jax(script, *args, home):
    proc = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={"KERAS_BACKEND": "jax", "PATH": "/usr/bin:/bin", "HOME": str(home),
                                            "JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_loss_under_jax_jit_without_tensorflow(tmp_path):
    batch = random_batch(8, positives=(5, 0, 30), boxes=60, classes=7)
    np.savez(tmp_path / "batch.npz", **dict(zip(("offsets", "labels", "loc", "logits"), batch)))
    result = run_on_jax(JAX_LOSS, str(tmp_path / "batch.npz"), home=tmp_path)
    assert result["loss"] == pytest.approx(reference_loss(*batch), rel=1e-5)
    assert result["grads_finite"] and not result["tensorflow_imported"]


@pytest.mark.slow   # about 30-50 s here: JAX compiles each initializer shape once on the first build
def test_model_under_jax_jit_without_tensorflow(tmp_path):
    result = run_on_jax(JAX_MODEL, home=tmp_path)
    assert result["shapes"] == [[1, 8732, 4], [1, 8732, 81]] and result["dtypes"] == ["float32", "float32"]
    assert not result["tensorflow_imported"]


# ---- pretrained backbone: loader and converter ----

RESNET34_BACKBONE_TENSORS = 29 * 5   # 29 convolutions (1 + 3x2 + 4x2+1 + 6x2+1), each with a BN of 4 tensors


def test_backbone_weights_round_trip(tiny_model, tmp_path):
    path = str(tmp_path / "backbone.npz")
    assert ssd.save_backbone_weights(tiny_model, path) == RESNET34_BACKBONE_TENSORS
    keras.utils.set_random_seed(2)
    other = ssd.ssd300(width=TINY)
    extra_before = keras.ops.convert_to_numpy(other.get_layer("extra1_1_conv").kernel).copy()
    assert ssd.load_backbone_weights(other, path) == RESNET34_BACKBONE_TENSORS
    for key, v in ssd.backbone_variables(other).items():
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(v), keras.ops.convert_to_numpy(
            ssd.backbone_variables(tiny_model)[key]), err_msg=key)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(other.get_layer("extra1_1_conv").kernel), extra_before)


def test_backbone_weights_errors(tiny_model, tmp_path):
    good = str(tmp_path / "good.npz")
    ssd.save_backbone_weights(tiny_model, good)
    arrays = dict(np.load(good))

    def write(name, **changes):
        data = {**arrays, **changes}
        data = {k: v for k, v in data.items() if v is not None}
        np.savez(tmp_path / name, **data)
        return str(tmp_path / name)

    with pytest.raises(ConfigError, match="missing.npz: backbone weights file not found"):
        ssd.load_backbone_weights(tiny_model, str(tmp_path / "missing.npz"))
    (tmp_path / "garbage.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="garbage.npz: not a readable .npz"):
        ssd.load_backbone_weights(tiny_model, str(tmp_path / "garbage.npz"))
    path = write("no_key.npz", **{"stage2_block3_1_bn/moving_variance": None})
    with pytest.raises(ConfigError, match=r"no_key.npz: no array for backbone variable stage2_block3_1_bn/moving_var"):
        ssd.load_backbone_weights(tiny_model, path)
    path = write("shape.npz", **{"stem_conv/kernel": np.zeros((7, 7, 3, 64), np.float32)})
    with pytest.raises(ConfigError, match=r"shape.npz: stem_conv/kernel has shape \(7, 7, 3, 64\), the model's is "
                                          r"\(7, 7, 3, 8\)"):
        ssd.load_backbone_weights(tiny_model, path)
    path = write("extra.npz", **{"stage4_block1_1_conv/kernel": np.zeros((3, 3, 8, 8), np.float32)})
    with pytest.raises(ConfigError, match="extra.npz: stage4_block1_1_conv/kernel names no backbone variable"):
        ssd.load_backbone_weights(tiny_model, path)


def torchvision_resnet34_state_dict(width, seed=0):
    """A state dict with torchvision resnet34's keys, order and shapes (channels / 64 x width), random values."""
    rng = np.random.default_rng(seed)
    sd = {}

    def conv(name, cout, cin, k):
        sd[f"{name}.weight"] = rng.normal(0, 0.1, (cout, cin, k, k)).astype(np.float32)

    def bn(name, c):
        sd[f"{name}.weight"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        sd[f"{name}.bias"] = rng.normal(0, 0.1, c).astype(np.float32)
        sd[f"{name}.running_mean"] = rng.normal(0, 0.1, c).astype(np.float32)
        sd[f"{name}.running_var"] = rng.uniform(0.5, 2.0, c).astype(np.float32)
        sd[f"{name}.num_batches_tracked"] = np.array(1000, np.int64)

    conv("conv1", width, 3, 7)
    bn("bn1", width)
    cin = width
    for s, blocks in enumerate((3, 4, 6, 3), start=1):
        c = width * 2 ** (s - 1)
        for b in range(blocks):
            p = f"layer{s}.{b}"
            conv(f"{p}.conv1", c, cin if b == 0 else c, 3)
            bn(f"{p}.bn1", c)
            conv(f"{p}.conv2", c, c, 3)
            bn(f"{p}.bn2", c)
            if b == 0 and s > 1:
                conv(f"{p}.downsample.0", c, cin, 1)
                bn(f"{p}.downsample.1", c)
        cin = c
    sd["fc.weight"] = rng.normal(size=(1000, cin)).astype(np.float32)
    sd["fc.bias"] = np.zeros(1000, np.float32)
    return sd


def test_converter_maps_torchvision_names_and_layouts(tiny_model, tmp_path):
    sd = torchvision_resnet34_state_dict(TINY)
    out = ssd_backbone.convert(sd)
    assert set(out) == set(ssd.backbone_variables(tiny_model))
    np.testing.assert_array_equal(out["stage2_block1_proj_conv/kernel"][0, 0],
                                  sd["layer2.0.downsample.0.weight"][:, :, 0, 0].T)
    np.testing.assert_array_equal(out["stage3_block4_2_conv/kernel"], sd["layer3.3.conv2.weight"].transpose(2, 3, 1, 0))
    np.testing.assert_array_equal(out["stage3_block4_2_conv/kernel"][2, 0, 5, 1],
                                  sd["layer3.3.conv2.weight"][1, 5, 2, 0])
    np.testing.assert_array_equal(out["stem_bn/moving_variance"], sd["bn1.running_var"])
    np.testing.assert_array_equal(out["stage1_block3_1_bn/gamma"], sd["layer1.2.bn1.weight"])
    np.testing.assert_array_equal(out["stage3_block1_proj_bn/beta"], sd["layer3.0.downsample.1.bias"])
    np.testing.assert_array_equal(out["stage2_block2_2_bn/moving_mean"], sd["layer2.1.bn2.running_mean"])
    assert len(ssd_backbone.torch_backbone_keys()) == len(out) == RESNET34_BACKBONE_TENSORS
    np.savez(tmp_path / "converted.npz", **out)
    keras.utils.set_random_seed(3)
    model = ssd.ssd300(width=TINY)
    assert ssd.load_backbone_weights(model, str(tmp_path / "converted.npz")) == RESNET34_BACKBONE_TENSORS


def torch_stem(image, sd):
    """torchvision's conv1 (7x7/2, padding 3) -> bn1 (eval) -> relu -> maxpool (3/2, padding 1) in NumPy, on the
    reference's normalised NCHW input."""
    x = (image.astype(np.float64) / 255 - np.array(ssd.IMAGENET_MEAN)) / np.array(ssd.IMAGENET_STD)
    x = np.pad(x.transpose(2, 0, 1), ((0, 0), (3, 3), (3, 3)))
    windows = np.lib.stride_tricks.sliding_window_view(x, (7, 7), axis=(1, 2))[:, ::2, ::2]   # [3, 150, 150, 7, 7]
    y = np.einsum("chwij,ocij->ohw", windows, sd["conv1.weight"].astype(np.float64))
    scale = sd["bn1.weight"] / np.sqrt(sd["bn1.running_var"] + 1e-5)
    y = (y - sd["bn1.running_mean"][:, None, None]) * scale[:, None, None] + sd["bn1.bias"][:, None, None]
    y = np.pad(np.maximum(y, 0), ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    y = np.lib.stride_tricks.sliding_window_view(y, (3, 3), axis=(1, 2))[:, ::2, ::2].max(axis=(-1, -2))
    return y.transpose(1, 2, 0)                                                               # [75, 75, C]


def test_converted_stem_computes_what_torchvision_computes(tmp_path):
    # The kernel layout (OIHW -> HWIO, no flip), the normalisation, the stem's padding and the torchvision-style
    # pool, checked against torch's semantics written out in NumPy; the TF-style "same" pool would not match.
    sd = torchvision_resnet34_state_dict(TINY, seed=5)
    np.savez(tmp_path / "converted.npz", **ssd_backbone.convert(sd))
    model = ssd.ssd300(width=TINY)
    ssd.load_backbone_weights(model, str(tmp_path / "converted.npz"))
    image = np.random.default_rng(6).integers(0, 256, (300, 300, 3), dtype=np.uint8)
    stem = keras.Model(model.input, model.get_layer("stem_pool").output)
    ours = keras.ops.convert_to_numpy(stem(image[None], training=False))[0]
    expected = torch_stem(image, sd)
    np.testing.assert_allclose(ours, expected, atol=2e-4, rtol=1e-4)
    relu = keras.Model(model.input, model.get_layer("stem_relu").output)(image[None], training=False)
    same_pool = keras.ops.convert_to_numpy(keras.layers.MaxPooling2D(3, 2, padding="same")(relu))[0]
    assert np.abs(same_pool - expected).max() > 0.1


def test_converter_rejects_other_checkpoints():
    sd = torchvision_resnet34_state_dict(TINY)
    resnet18 = {k: v for k, v in sd.items() if not k.startswith(("layer1.2.", "layer2.2.", "layer2.3.", "layer3.2."))}
    with pytest.raises(DataError, match=r"r18.pth: no layer1.2.conv1.weight \(\d+ backbone tensors missing\)"):
        ssd_backbone.convert(resnet18, source="r18.pth")
    with pytest.raises(DataError, match=r"r50.pth: layer1.0.conv3.weight: not a torchvision ResNet"):
        ssd_backbone.convert({**sd, "layer1.0.conv3.weight": np.zeros((8, 8, 1, 1), np.float32)}, source="r50.pth")
    with pytest.raises(DataError, match=r"x.pth: layer1.0.conv1.weight has shape \(8, 8\)"):
        ssd_backbone.convert({**sd, "layer1.0.conv1.weight": np.zeros((8, 8), np.float32)}, source="x.pth")
    assert ssd_backbone.keras_name("layer4.0.downsample.0.weight") is None
    assert ssd_backbone.keras_name("layer3.0.downsample.1.running_var") == "stage3_block1_proj_bn/moving_variance"


def test_converter_command_reports_a_bad_checkpoint_in_one_line(tmp_path):
    proc = run_cli("data_prep.ssd_backbone", f"--torchvision_checkpoint={tmp_path}/absent.pth",
                   f"--output={tmp_path}/out.npz")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"error: {tmp_path}/absent.pth:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out.npz").exists()
