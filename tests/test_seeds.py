"""Model parts get seeds of their own, within a run and across runs of nearby seeds (layers/seeds.py)."""
import numpy as np

from mlperf_keras.layers.seeds import derive_seed


def test_derived_seeds_do_not_overlap_across_nearby_runs():
    seeds = {derive_seed(run, part) for run in range(1, 50) for part in range(40)}
    assert len(seeds) == 49 * 40  # with seed + part, run 2's part 0 would equal run 1's part 1
    assert derive_seed(None, 3) is None
    assert derive_seed(7, 1, 2) == derive_seed(7, 1, 2) != derive_seed(7, 2, 1)


def test_transformer_runs_of_consecutive_seeds_share_no_weights():
    from mlperf_keras.layers.transformer import TransformerModel

    def kernels(seed):
        model = TransformerModel(64, 16, 2, 2, 32, 0.1, seed=seed, name="transformer")
        model.build()
        return [np.asarray(w) for w in model.weights if w.ndim == 2]

    first, second = kernels(1), kernels(2)
    own = first + second
    for i, a in enumerate(own):
        for b in own[i + 1:]:
            if a.shape == b.shape:
                assert not np.array_equal(a, b)
