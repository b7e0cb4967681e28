"""FPN (layers/fpn.py): shapes P2-P6, the top-down sum with nearest upsampling, P6 as P5 subsampled."""
from __future__ import annotations

import keras
import numpy as np

from mlperf_keras.layers.fpn import fpn


def _tiny_fpn(channels=4):
    inputs = [keras.Input((s, s, c)) for s, c in ((16, 3), (8, 5), (4, 6), (2, 7))]
    return keras.Model(inputs, fpn(inputs, channels=channels))


def test_fpn_shapes_and_parameters():
    model = _tiny_fpn()
    outs = model([np.zeros((2, s, s, c), np.float32) for s, c in ((16, 3), (8, 5), (4, 6), (2, 7))])
    assert [tuple(o.shape) for o in outs] == [(2, 16, 16, 4), (2, 8, 8, 4), (2, 4, 4, 4), (2, 2, 2, 4),
                                              (2, 1, 1, 4)]
    # inner 1x1 (in x 4 + 4) and layer 3x3 (9 x 4 x 4 + 4) per level.
    assert model.count_params() == sum(c * 4 + 4 + 9 * 16 + 4 for c in (3, 5, 6, 7))
    # At full size: inner 256 x (256 + 512 + 1024 + 2048) + 4 x 256, layer 4 x (9 x 256^2 + 256) = 3,344,384
    # (torchvision's BackboneWithFPN's fpn has the same).
    full = keras.Model(*(lambda i: (i, fpn(i)))([keras.Input((64 // 2 ** k, 64 // 2 ** k, c))
                                                  for k, c in enumerate((256, 512, 1024, 2048))]))
    assert full.count_params() == 3_344_384


def test_fpn_top_down_matches_numpy():
    model = _tiny_fpn()
    rng = np.random.default_rng(1)
    for w in model.weights:
        w.assign(rng.normal(size=w.shape).astype(np.float32))
    xs = [rng.normal(size=(1, s, s, c)).astype(np.float32) for s, c in ((16, 3), (8, 5), (4, 6), (2, 7))]
    outs = [keras.ops.convert_to_numpy(o) for o in model(xs)]

    def conv(name, x):
        layer = model.get_layer(name)
        kernel, bias = (keras.ops.convert_to_numpy(v) for v in layer.weights)
        k = kernel.shape[0]
        pad = np.pad(x, ((0, 0), (k // 2, k // 2), (k // 2, k // 2), (0, 0)))
        h, w = x.shape[1:3]
        out = np.zeros((1, h, w, kernel.shape[-1]))
        for i in range(k):
            for j in range(k):
                out += pad[:, i:i + h, j:j + w, :] @ kernel[i, j]
        return out + bias

    last = conv("fpn_inner5", xs[3])
    want = {5: conv("fpn_layer5", last)}
    for level in (4, 3, 2):
        last = conv(f"fpn_inner{level}", xs[level - 2]) + last.repeat(2, axis=1).repeat(2, axis=2)
        want[level] = conv(f"fpn_layer{level}", last)
    for level in (2, 3, 4, 5):
        np.testing.assert_allclose(outs[level - 2], want[level], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(outs[4], outs[3][:, ::2, ::2])
