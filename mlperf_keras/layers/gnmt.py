"""GNMT v2 (MLPerf's recurrent translator), in keras.layers / keras.ops only (TensorFlow and JAX backends).

As the MLPerf reference, mlcommons/training rnn_translator/pytorch at commit 69dbe8b (the v0.6 reference, unchanged
for v0.7): seq2seq/models/{gnmt,encoder,decoder,attention}.py and seq2seq/utils.py (init_lstm_):
- one embedding of `vocab_size` x `hidden` shared by encoder and decoder;
- encoder: a bidirectional LSTM (hidden per direction; it reads only each sentence's real tokens, the reference's
  packed sequence, here a Keras mask), then `num_layers - 1` LSTMs (the first with 2 x hidden inputs) with residual
  connections from the third layer on;
- decoder: an LSTM over the embedded targets whose output is the query of a normalized Bahdanau attention over the
  encoder outputs (layers/attention.py), then `num_layers - 1` LSTMs fed [previous output, attention context],
  residual connections on all but the first of them; a classifier (Dense with bias) over the vocabulary;
- dropout `dropout` on the input of every LSTM layer (the embeddings and the concatenations included), nowhere else;
- every weight initialised U(-0.1, 0.1): embedding, LSTM kernels, classifier weight and bias, attention projections
  and vector; attention scale g = 1/sqrt(hidden), its bias 0.

- every LSTM direction has PyTorch's two biases: bias_ih U(-0.1, 0.1) and bias_hh 0 (init_lstm_, seq2seq/utils.py
  lines 31-56); Keras' one bias per gate is their sum on every path (ReferenceLSTMCell), so each receives the full
  gradient, as in PyTorch, and the model has the reference's 160,671,297 parameters at vocabulary 32,320
  (`parameter_count`). Keras' forget-gate bias of 1 (unit_forget_bias) is turned off, as the reference.

Deliberate differences:
- The reference's padding embedding row (padding_idx=PAD in nn.Embedding) gets no gradient and so never moves;
  here it is an ordinary row, but its gradient is exactly 0 as well, since padding positions are masked in the
  bidirectional layer, the attention and the loss. Under Adam with a zero gradient the row still does not move.
- On JAX under mixed precision the LSTMs run on lstm_sequence (default_lstm_path): the same equations and weights,
  matrix products in bf16/fp16 with the cell state in float32 (the reference trains in fp32 by default, NVIDIA's
  submissions in fp16 with cuDNN); elsewhere Keras' LSTM.
- Random numbers: the framework's own. One keras.random.SeedGenerator per build feeds every initializer (each layer
  its own draws), dropout layers get distinct seeds derived from the run's seed.

Token ids as the reference (seq2seq/data/config.py): 0 <pad>, 1 <unk>, 2 <s> (BOS), 3 </s> (EOS). Sources and
targets are stored as BOS + tokens + EOS; the decoder reads target[:-1] and predicts target[1:].
"""
from __future__ import annotations

import dataclasses

import keras
from keras import ops

from mlperf_keras.layers.attention import NormalizedBahdanauAttention
from mlperf_keras.layers.seeds import derive_seed

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class GNMTOptions:
    vocab_size: int = 32_320
    hidden: int = 1024
    num_layers: int = 4          # per side (the encoder's first is bidirectional)
    dropout: float = 0.2
    init_range: float = 0.1


def parameter_count(options: GNMTOptions) -> int:
    """Trainable parameters, two biases (bias_ih + bias_hh) per LSTM direction as the reference's PyTorch LSTMs."""
    v, h, n = options.vocab_size, options.hidden, options.num_layers

    def lstm(inputs):  # 4 gates x (input weights + recurrent weights + biases)
        return 4 * h * (inputs + h) + 2 * 4 * h

    embedding = v * h
    encoder = 2 * lstm(h) + lstm(2 * h) + (n - 2) * lstm(h)
    attention = 2 * h * h + h + 1 + h          # W_q, W_k, vector v, scale g, bias b
    decoder = lstm(h) + attention + (n - 1) * lstm(2 * h) + (h * v + v)
    return embedding + encoder + decoder


class ReferenceLSTMCell(keras.layers.LSTMCell):
    """keras.layers.LSTMCell with PyTorch's two biases, bias_ih (initialised by bias_initializer) and bias_hh
    (initialised 0), as the reference's nn.LSTM with init_lstm_ (mlcommons/training rnn_translator/pytorch/
    seq2seq/utils.py at 69dbe8b). `bias` is their sum, read by Keras' cell, its cuDNN paths and lstm_sequence, so
    both variables get the gradient of the one summed bias, as PyTorch's do."""

    def build(self, input_shape):
        keras.layers.Layer.build(self, input_shape)
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units * 4), name="kernel",
                                      initializer=self.kernel_initializer)
        self.recurrent_kernel = self.add_weight(shape=(self.units, self.units * 4), name="recurrent_kernel",
                                                initializer=self.recurrent_initializer)
        self.bias_ih = self.add_weight(shape=(self.units * 4,), name="bias_ih", initializer=self.bias_initializer)
        self.bias_hh = self.add_weight(shape=(self.units * 4,), name="bias_hh", initializer="zeros")

    @property
    def bias(self):
        return ops.add(self.bias_ih, self.bias_hh)


class ReferenceLSTM(keras.layers.LSTM):
    """keras.layers.LSTM (return_sequences, cuDNN where Keras uses it) over a ReferenceLSTMCell."""

    def __init__(self, units, initializer, go_backwards=False, dtype=None, name=None):
        cell = ReferenceLSTMCell(units, kernel_initializer=initializer, recurrent_initializer=initializer,
                                 bias_initializer=initializer, unit_forget_bias=False, dtype=dtype,
                                 name="lstm_cell")
        keras.layers.RNN.__init__(self, cell, return_sequences=True, go_backwards=go_backwards, dtype=dtype,
                                  name=name)
        self.input_spec = keras.layers.InputSpec(ndim=3)
        self.use_cudnn = "auto"
        if keras.backend.backend() == "tensorflow" and _cudnn_possible():
            self.supports_jit = False   # as keras.layers.LSTM: its cuDNN op is not XLA-compatible


def _cudnn_possible() -> bool:
    from keras.src import backend

    return backend.cudnn_ok(keras.activations.tanh, keras.activations.sigmoid, False, True)


LSTM_PATHS = ("keras", "scan")
SCAN_UNROLL = 4  # timesteps per loop iteration of the scan path (benchmarks/RESULTS.md: 4 beat 1 on an H200)


def default_lstm_path() -> str:
    """"scan" on JAX under mixed precision (the LSTMs then run in bf16/fp16), "keras" otherwise.

    Keras' JAX LSTM runs cuDNN through jax.experimental.rnn, which rejects bfloat16 and float16 ("Unknown output
    type bfloat16"), so under mixed precision it has to run in float32 (and the masked encoder layer cannot use
    cuDNN at all: Keras' generic loop); lstm_sequence runs in the compute dtype. In float32 Keras' LSTM (cuDNN on a
    GPU) is as fast or faster. benchmarks/experiments/gnmt_lstm_paths.py times both; benchmarks/RESULTS.md has
    the numbers."""
    mixed = keras.mixed_precision.global_policy().compute_dtype != "float32"
    return "scan" if keras.backend.backend() == "jax" and mixed else "keras"


def _lstm_dtype(path: str):
    """float32 for Keras' LSTM under mixed precision on JAX (cuDNN there rejects bf16, see default_lstm_path); the
    scan path and TensorFlow follow the global policy. The embedding, attention and classifier keep the policy."""
    if (path == "keras" and keras.backend.backend() == "jax"
            and keras.mixed_precision.global_policy().compute_dtype != "float32"):
        return "float32"
    return None


def lstm_sequence(layer, x, mask=None, reverse=False, unroll: int = 1):
    """keras.layers.LSTM `layer`'s function over a whole sequence (return_sequences, zero initial state), with the
    input projection x @ kernel + bias done once for all timesteps and only h @ recurrent_kernel inside the loop.

    The same equations, gate order (i, f, c, o) and weights as the layer: outputs equal layer(x, mask=mask) (with
    reverse for a go_backwards layer, whose outputs come back in input order, not reversed). Matrix products run
    in the layer's compute dtype (bf16 under mixed precision), the gates and the cell state c in float32, h in the
    compute dtype. A masked step keeps the previous h and c and outputs the previous h, as Keras' masked LSTM
    (zero_output_for_mask=False); running in reverse over right-padded rows, the state stays zero until the last
    real token, as the reference's packed sequence."""
    cell = layer.cell
    dtype = layer.compute_dtype
    x = ops.cast(x, dtype)
    kernel = ops.cast(cell.kernel, dtype)
    recurrent = ops.cast(cell.recurrent_kernel, dtype)
    gates_in = ops.matmul(x, kernel) + ops.cast(cell.bias, dtype)        # [B, T, 4H], one matmul for all steps
    gates_in = ops.transpose(gates_in, (1, 0, 2))                         # [T, B, 4H]
    batch, units = ops.shape(x)[0], cell.units
    h0 = ops.zeros((batch, units), dtype)
    c0 = ops.zeros((batch, units), "float32")

    def step(carry, inputs):
        h, c = carry
        z_in, m = inputs if mask is not None else (inputs, None)
        z = ops.cast(z_in, "float32") + ops.cast(ops.matmul(h, recurrent), "float32")
        i, f, g, o = ops.split(z, 4, axis=-1)
        c_new = ops.sigmoid(f) * c + ops.sigmoid(i) * ops.tanh(g)
        h_new = ops.cast(ops.sigmoid(o) * ops.tanh(c_new), dtype)
        if m is not None:
            h_new = ops.where(m, h_new, h)
            c_new = ops.where(m, c_new, c)
        return (h_new, c_new), h_new

    xs = gates_in if mask is None else (gates_in, ops.expand_dims(ops.transpose(mask), -1))
    _, outputs = ops.scan(step, (h0, c0), xs, reverse=reverse, unroll=unroll)
    return ops.transpose(outputs, (1, 0, 2))


class GNMT(keras.Model):
    """call({"source": [B, S], "target_input": [B, T]}) -> logits [B, T, vocab]. Decoding: `beam_decoder`."""

    def __init__(self, options: GNMTOptions = GNMTOptions(), seed: int | None = None, lstm_path: str | None = None,
                 **kwargs):
        super().__init__(**kwargs)
        self.options = options
        self.lstm_path = lstm_path or default_lstm_path()
        if self.lstm_path not in LSTM_PATHS:
            raise ValueError(f"lstm_path must be one of {LSTM_PATHS}, not {self.lstm_path!r}")
        if self.lstm_path == "scan" and keras.backend.backend() != "jax":
            raise ValueError("lstm_path='scan' runs on the JAX backend only (Keras' TensorFlow scan rejects its "
                             "carry); TensorFlow uses Keras' LSTM")
        h, r = options.hidden, options.init_range
        self.seed_generator = keras.random.SeedGenerator(seed)
        init = keras.initializers.RandomUniform(-r, r, seed=self.seed_generator)

        def lstm(name, go_backwards=False):
            return ReferenceLSTM(h, init, go_backwards=go_backwards, dtype=_lstm_dtype(self.lstm_path), name=name)

        self.embedding = keras.layers.Embedding(options.vocab_size, h, embeddings_initializer=init, name="embedding")
        # The bidirectional layer as two LSTMs: keras.layers.Bidirectional rebuilds its forward layer from its
        # config, which turns the seed generator into a fixed seed (the kernel and recurrent kernel came out equal).
        self.encoder_forward = lstm("encoder_0_forward")
        self.encoder_backward = lstm("encoder_0_backward", go_backwards=True)
        self.encoder_layers = [lstm(f"encoder_{i}") for i in range(1, options.num_layers)]
        self.decoder_layers = [lstm(f"decoder_{i}") for i in range(options.num_layers)]
        self.attention = NormalizedBahdanauAttention(h, r, seed=self.seed_generator, name="attention")
        self.classifier = keras.layers.Dense(options.vocab_size, kernel_initializer=init, bias_initializer=init,
                                             name="classifier")
        base = 0 if seed is None else int(seed)
        self.encoder_dropouts = [keras.layers.Dropout(options.dropout, seed=derive_seed(base, 101 + i))
                                 for i in range(options.num_layers)]
        self.decoder_dropouts = [keras.layers.Dropout(options.dropout, seed=derive_seed(base, 201 + i))
                                 for i in range(options.num_layers)]

    def build(self, input_shape=None):
        h = self.options.hidden
        self.embedding.build((None, None))
        self.encoder_forward.build((None, None, h))
        self.encoder_backward.build((None, None, h))
        self.encoder_layers[0].build((None, None, 2 * h))
        for layer in self.encoder_layers[1:]:
            layer.build((None, None, h))
        self.decoder_layers[0].build((None, None, h))
        for layer in self.decoder_layers[1:]:
            layer.build((None, None, 2 * h))
        self.attention.build((None, None, h), (None, None, h))
        self.classifier.build((None, None, h))
        self.built = True

    # -- Training graph -------------------------------------------------------------------------------------------

    def _run_lstm(self, layer, x, mask=None, training=False):
        """A whole-sequence LSTM (outputs in input order, also for the backward layer) on the chosen path."""
        if self.lstm_path == "scan":
            return lstm_sequence(layer, x, mask, reverse=layer.go_backwards, unroll=SCAN_UNROLL)
        y = layer(x, mask=mask, training=training)
        return ops.flip(y, axis=1) if layer.go_backwards else y

    def encode(self, source, training=False):
        """source [B, S] -> (encoder outputs [B, S, hidden], mask [B, S] bool, True = a real token)."""
        mask = ops.not_equal(source, PAD_ID)
        x = self.encoder_dropouts[0](self.embedding(source), training=training)
        backward = self._run_lstm(self.encoder_backward, x, mask, training)
        x = ops.concatenate([self._run_lstm(self.encoder_forward, x, mask, training), backward], axis=-1)
        x = self._run_lstm(self.encoder_layers[0], self.encoder_dropouts[1](x, training=training), None, training)
        for i, layer in enumerate(self.encoder_layers[1:], start=2):
            x = x + self._run_lstm(layer, self.encoder_dropouts[i](x, training=training), None, training)
        return x, mask

    def decode_hidden(self, target_input, memory, mask, training=False):
        """The decoder's last LSTM output [B, T, hidden] (the classifier's input)."""
        x = self.decoder_dropouts[0](self.embedding(target_input), training=training)
        x = self._run_lstm(self.decoder_layers[0], x, None, training)
        # Layer 1's outputs over all steps are the queries: the attention, and so every later layer, is time-batched
        # (the reference's RecurrentAttention and ResidualRecurrentDecoder.forward, seq2seq/models/decoder.py).
        context, _ = self.attention(x, self.attention.project_keys(memory), memory, mask)
        x = self._run_lstm(self.decoder_layers[1],
                           self.decoder_dropouts[1](ops.concatenate([x, context], -1), training=training), None,
                           training)
        for i, layer in enumerate(self.decoder_layers[2:], start=2):
            y = self.decoder_dropouts[i](ops.concatenate([x, context], -1), training=training)
            x = x + self._run_lstm(layer, y, None, training)
        return x

    def decode(self, target_input, memory, mask, training=False):
        return self.classifier(self.decode_hidden(target_input, memory, mask, training=training))

    def call(self, inputs, training=False):
        memory, mask = self.encode(inputs["source"], training=training)
        return self.decode(inputs["target_input"], memory, mask, training=training)

    # -- Incremental decoding (mlperf_keras.decoding) -------------------------------------------------------------

    def beam_decoder(self, source, beam_size: int):
        """(step, state) for decoding.beam_search: the encoder runs once, its outputs are repeated per beam;
        step(ids [B*K], position, state) -> (logits [B*K, V], attention weights [B*K, S] float32, state), with
        state the (h, c) of every decoder LSTM, row b*K + k for beam k of sentence b."""
        memory, mask = self.encode(source, training=False)
        memory = ops.repeat(memory, beam_size, axis=0)
        mask = ops.repeat(mask, beam_size, axis=0)
        keys = self.attention.project_keys(memory)
        rows = int(source.shape[0]) * beam_size
        zeros = ops.zeros((rows, self.options.hidden), self.decoder_layers[0].compute_dtype)
        state = [[zeros, zeros] for _ in self.decoder_layers]

        def step(ids, position, state):
            del position
            x = self.embedding(ids)
            new_state = []
            x, s = self.decoder_layers[0].cell(x, state[0], training=False)
            new_state.append(list(s))
            context, weights = self.attention(ops.expand_dims(x, 1), keys, memory, mask)
            context = context[:, 0]
            x, s = self.decoder_layers[1].cell(ops.concatenate([x, context], -1), state[1], training=False)
            new_state.append(list(s))
            for layer, layer_state in zip(self.decoder_layers[2:], state[2:]):
                y, s = layer.cell(ops.concatenate([x, context], -1), layer_state, training=False)
                new_state.append(list(s))
                x = x + y
            return self.classifier(x), weights[:, 0], new_state

        return step, state


__all__ = ["PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID", "GNMTOptions", "GNMT", "LSTM_PATHS", "default_lstm_path",
           "lstm_sequence", "parameter_count", "ReferenceLSTM", "ReferenceLSTMCell"]
