"""python -m data_prep.wmt_gnmt --raw_dir=R --output_dir=D (also `python -m data_prep.wmt --workload=gnmt ...`):
WMT16 En-De -> the MLPerf GNMT dataset.

Reads the official WMT16 material from R, archives (.tgz / .tar.gz / .tar) or unpacked, found by file name anywhere
below R (data_prep.wmt_common's RawFiles and read_raw_corpus, which data_prep.wmt shares):
    europarl        europarl-v7.de-en.{en,de}          training-parallel-europarl-v7.tgz
    commoncrawl     commoncrawl.de-en.{en,de}          training-parallel-commoncrawl.tgz
    news_commentary news-commentary-v11.de-en.{en,de}  training-parallel-nc-v11.tgz
    test            newstest2014-deen-{src.en,ref.de}.sgm (dev.tgz / test-full.tgz) or newstest2014.{en,de}

As the reference's data script (mlcommons/training rnn_translator/download_dataset.sh and
pytorch/scripts/filter_dataset.py at 69dbe8b, the v0.6/v0.7 reference):
1. Moses tokenisation of every side (`tokenizer.perl -l en/-l de`, escaping on: sacremoses' MosesTokenizer with
   escape=True, the same rules in Python);
2. clean-corpus-n.perl 1 80 on the training pairs: drop pairs with a side of fewer than 1 or more than 80 tokens,
   whose token counts differ by more than the script's default ratio 9, or with a word (a run of characters other
   than whitespace and |) longer than the script's default -max-word-length 1000;
3. drop training pairs that Python cannot encode as latin-1 (filter_dataset.py);
4. joint BPE (subword-nmt learn_bpe, 32,000 merges, min frequency 2) learned on the German then the English side,
   applied to the training pairs and the test source;
5. vocabulary = <pad>, <unk>, <s>, </s> + the BPE tokens of the training text by frequency (get_vocab.py), not
   padded: the reference's Tokenizer pads with madeupwordNNNN to a multiple of 8 only under --math fp16
   (seq2seq/utils.py pad_vocabulary; its default fp32 pads to 1), which the GNMT workload does at training time
   (workloads/gnmt.py padded_vocab_size);
6. ids = <s> + tokens + </s> (unknown tokens: <unk>); training pairs with a side longer than --max_length (50 with
   <s> and </s>, the reference's --max-length-train; 75 allowed) are discarded, the test set never.
Training pairs are shuffled with --seed into --num_shards TFRecord shards ("inputs", "targets"), each listed in the
manifest with its histogram of pair lengths (the longer side); the test source becomes one eval shard with line
indices; the raw German references (newstest2014.de as input-from-sgm.perl writes it), the vocabulary and the BPE
codes are kept beside them. Everything lands atomically with the manifest.

Differences: subword-nmt 0.3.8 from PyPI instead of the reference's git checkout 48ba99e; the dev set
(newstest2015/2016) is not prepared (the reference only reports its loss; no MLPerf rule uses it).
"""
from __future__ import annotations

import collections
import os
import time

import numpy as np
from absl import flags

from data_prep import cli
from data_prep.wmt_common import check_corpora_and_shards, read_raw_corpus, write_eval_set, write_test_sgm
from mlperf_keras import entry
from mlperf_keras.inputs.manifest import DataError, StagedOutput

CORPORA = {  # name -> (file stem inside the archive, the archive WMT16 distributes it in)
    "europarl": ("europarl-v7.de-en", "training-parallel-europarl-v7.tgz"),
    "commoncrawl": ("commoncrawl.de-en", "training-parallel-commoncrawl.tgz"),
    "news_commentary": ("news-commentary-v11.de-en", "training-parallel-nc-v11.tgz"),
}
SPECIALS = ("<pad>", "<unk>", "<s>", "<\\s>")   # the reference's tokens (its EOS is spelled <\s>)
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
CLEAN_MIN, CLEAN_MAX, CLEAN_RATIO, CLEAN_MAX_WORD = 1, 80, 9.0, 1000


# ---------------------------------------------------------------------------------------------------------------------
# Tokenisation, cleaning, BPE

_TOKENIZERS = {}


def _tokenize_chunk(args):
    lang, lines = args
    from sacremoses import MosesTokenizer

    tok = _TOKENIZERS.setdefault(lang, MosesTokenizer(lang=lang))
    return [tok.tokenize(line, escape=True, return_str=True) for line in lines]


def _map_chunks(fn, lang, lines, threads, chunk=20_000):
    jobs = [(lang, lines[i:i + chunk]) for i in range(0, len(lines), chunk)]
    if threads > 1 and len(jobs) > 1:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(threads) as pool:
            parts = pool.map(fn, jobs)
    else:
        parts = [fn(job) for job in jobs]
    return [line for part in parts for line in part]


def moses_tokenize(lines, lang: str, threads: int = 1) -> list[str]:
    return _map_chunks(_tokenize_chunk, lang, lines, threads)


def clean_corpus(en, de, min_tokens=CLEAN_MIN, max_tokens=CLEAN_MAX, ratio=CLEAN_RATIO,
                 max_word_length=CLEAN_MAX_WORD):
    """clean-corpus-n.perl: whitespace collapsed; pairs outside [min, max] tokens, beyond the length ratio, or with
    a run of more than max_word_length characters other than whitespace and | go."""
    import re

    long_word = re.compile(r"[^\s|]{%d}" % (max_word_length + 1))
    keep_en, keep_de, dropped = [], [], 0
    for a, b in zip(en, de):
        a, b = " ".join(a.split()), " ".join(b.split())
        na, nb = len(a.split()), len(b.split())
        if not (min_tokens <= na <= max_tokens and min_tokens <= nb <= max_tokens) or na / nb > ratio \
                or nb / na > ratio or long_word.search(a) or long_word.search(b):
            dropped += 1
            continue
        keep_en.append(a)
        keep_de.append(b)
    return keep_en, keep_de, dropped


def latin1_filter(en, de):
    """filter_dataset.py: keep pairs whose both sides encode as latin-1."""
    keep_en, keep_de, dropped = [], [], 0
    for a, b in zip(en, de):
        try:
            a.encode("latin1")
            b.encode("latin1")
        except UnicodeEncodeError:
            dropped += 1
            continue
        keep_en.append(a)
        keep_de.append(b)
    return keep_en, keep_de, dropped


def learn_bpe(lines, codes_path: str, merges: int) -> None:
    from subword_nmt.learn_bpe import learn_bpe as learn

    with open(codes_path, "w", encoding="utf-8") as out:
        learn(iter([line + "\n" for line in lines]), out, merges, min_frequency=2)


_BPE = {}


def _bpe_chunk(args):
    codes, lines = args
    if codes not in _BPE:
        from subword_nmt.apply_bpe import BPE

        with open(codes, encoding="utf-8") as f:
            _BPE[codes] = BPE(f)
    bpe = _BPE[codes]
    return [bpe.process_line(line) for line in lines]


def apply_bpe(lines, codes_path: str, threads: int = 1) -> list[str]:
    return _map_chunks(_bpe_chunk, codes_path, lines, threads)


def build_vocabulary(bpe_lines) -> list[str]:
    """The specials, then the BPE tokens by descending frequency (get_vocab.py's order)."""
    counts = collections.Counter(tok for line in bpe_lines for tok in line.split())
    vocab = list(SPECIALS) + [tok for tok, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return vocab


def encode(bpe_lines, index: dict) -> list[list[int]]:
    return [[BOS_ID] + [index.get(t, UNK_ID) for t in line.split()] + [EOS_ID] for line in bpe_lines]


# ---------------------------------------------------------------------------------------------------------------------
# The command

def prepare(raw_dir: str, output_dir: str, corpora=tuple(CORPORA), merges: int = 32_000, max_length: int = 50,
            num_shards: int = 100, seed: int = 0, threads: int | None = None, overwrite: bool = False,
            log=print) -> dict:
    from mlperf_keras.inputs import text

    threads = threads or os.cpu_count() or 1
    check_corpora_and_shards(corpora, CORPORA, num_shards)
    if max_length < 3:
        raise DataError(f"--max_length must leave room for <s>, a token and </s>, got {max_length}")
    t0 = time.time()
    with StagedOutput(output_dir, overwrite=overwrite) as out:
        corpus = read_raw_corpus(raw_dir, out, output_dir, corpora, CORPORA, log)
        en, de, test_src, test_ref = corpus.en, corpus.de, corpus.test_src, corpus.test_ref
        raw_pairs = len(en)
        log(f"Moses tokenisation of {raw_pairs:,} pairs and {len(test_src):,} test sentences ({threads} processes)")
        en, de = moses_tokenize(en, "en", threads), moses_tokenize(de, "de", threads)
        test_tok = moses_tokenize(test_src, "en", threads)
        en, de, dropped_clean = clean_corpus(en, de)
        en, de, dropped_latin1 = latin1_filter(en, de)
        log(f"cleaned: {len(en):,} pairs kept ({dropped_clean:,} outside 1-80 tokens, ratio 9 or with a word over "
            f"1,000 characters, {dropped_latin1:,} not latin-1)")
        if not en:
            raise DataError(f"{raw_dir}: no training pair left after cleaning")

        codes = out.path(f"bpe.{merges}")
        t1 = time.time()
        learn_bpe(de + en, codes, merges)
        log(f"learned {merges:,} BPE merges in {time.time() - t1:.0f} s")
        en, de = apply_bpe(en, codes, threads), apply_bpe(de, codes, threads)
        test_bpe = apply_bpe(test_tok, codes, threads)
        vocab = build_vocabulary(en + de)
        vocab_name = f"vocab.bpe.{merges}"
        with open(out.path(vocab_name), "w", encoding="utf-8") as f:
            f.write("".join(tok + "\n" for tok in vocab))
        index = {tok: i for i, tok in enumerate(vocab)}
        src, tgt = encode(en, index), encode(de, index)
        del en, de
        keep = [i for i, (s, t) in enumerate(zip(src, tgt)) if len(s) <= max_length and len(t) <= max_length]
        dropped_long = len(src) - len(keep)
        if not keep:
            raise DataError(f"{raw_dir}: every training pair is longer than --max_length={max_length} tokens")
        log(f"vocabulary {len(vocab):,} entries; {len(keep):,} pairs within {max_length} tokens "
            f"({dropped_long:,} discarded)")

        import tensorflow as tf

        order = np.asarray(keep)[np.random.default_rng(seed).permutation(len(keep))]
        lengths = np.array([max(len(src[i]), len(tgt[i])) for i in order], dtype=np.int64)
        num_shards = min(num_shards, len(order))
        for k, rows in enumerate(np.array_split(np.arange(len(order)), num_shards)):
            name = f"train-{k:05d}-of-{num_shards:05d}.tfrecord"
            with tf.io.TFRecordWriter(out.path(name)) as writer:
                for r in rows:
                    writer.write(text.serialize_pair(src[order[r]], tgt[order[r]]))
            out.add(name, rows=len(rows), split="train", lengths=text.length_histogram(lengths[rows], max_length))
        write_eval_set(out, encode(test_bpe, index), test_ref)
        out.add(vocab_name, rows=len(vocab), split="vocab")
        out.add(f"bpe.{merges}", split="bpe_codes")

        counts = {"train_pairs": len(order), "eval_sentences": len(test_src), "vocab_size": len(vocab),
                  "raw_pairs": raw_pairs, "dropped_clean": dropped_clean, "dropped_latin1": dropped_latin1,
                  "dropped_long": dropped_long, "max_length": max_length}
        manifest = out.commit(
            "gnmt", "wmt16-en-de", counts,
            options={"corpora": list(corpora), "bpe_merges": merges, "max_length": max_length,
                     "num_shards": num_shards, "seed": seed, "tokenizer": "moses+subword-nmt",
                     "clean": [CLEAN_MIN, CLEAN_MAX, CLEAN_RATIO, CLEAN_MAX_WORD], "pad_id": PAD_ID, "bos_id": BOS_ID,
                     "eos_id": EOS_ID, "unk_id": UNK_ID},
            source={"corpora": corpus.per_corpus, "test_source": corpus.test_src_path,
                    "test_reference": corpus.test_ref_path})
    log(f"prepared {output_dir} in {time.time() - t0:.0f} s: {counts}")
    return manifest


# ---------------------------------------------------------------------------------------------------------------------
# A small corpus in the WMT16 layout (the demo and the tests)

def write_demo_raw(raw_dir: str, num_pairs: int = 6_000, num_test: int = 200, seed: int = 0, vocabulary: int = 24,
                   min_words: int = 2, max_words: int = 7, words: list[str] | None = None, word_weights=None,
                   sentence_words=None) -> None:
    """The three WMT16 corpora (num_pairs split among them, unpacked in the archives' folder names) and newstest2014
    as SGML. English sentences are random made-up words ending with a full stop; German is each word translated by a fixed
    dictionary, in order (GNMT's decoder starts from zero states: every source word reaches it through attention).
    words: the English words (default: `vocabulary` made-up ones); word_weights: their probabilities (default:
    equal); sentence_words: a function rng -> words in a sentence (default: uniform in [min_words, max_words])."""
    rng = np.random.default_rng(seed)
    if words is None:
        syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vi", "so", "pe", "du", "ga", "fi"]
        english = set()
        while len(english) < vocabulary:
            english.add("".join(rng.choice(syllables, size=int(rng.integers(1, 3)))))
        english = sorted(english)
    else:
        english = np.asarray(words)   # an array: rng.choice converts a list on every call
    german = dict(zip(english, rng.permutation([w + "en" for w in english])))

    def pair():
        count = int(rng.integers(min_words, max_words + 1)) if sentence_words is None else int(sentence_words(rng))
        words = list(rng.choice(english, size=count, p=word_weights))
        return " ".join(words) + ".", " ".join(german[w] for w in words) + "."  # raw text: "a b."

    folders = {"europarl": "training-parallel-europarl-v7/training", "commoncrawl": "training-parallel-commoncrawl",
               "news_commentary": "training-parallel-nc-v11/training"}
    for (corpus, folder), rows in zip(folders.items(), np.array_split(np.arange(num_pairs), len(folders))):
        directory = os.path.join(raw_dir, folder)
        os.makedirs(directory, exist_ok=True)
        pairs = [pair() for _ in rows]
        for lang, side in (("en", 0), ("de", 1)):
            with open(os.path.join(directory, f"{CORPORA[corpus][0]}.{lang}"), "w", encoding="utf-8") as f:
                f.write("".join(p[side] + "\n" for p in pairs))
    test = [pair() for _ in range(num_test)]
    write_test_sgm(os.path.join(raw_dir, "dev", "dev"), test)


FLAGS = flags.FLAGS


def define_flags():
    cli.define_common_flags("Folder holding the WMT16 archives (training-parallel-europarl-v7.tgz, "
                            "training-parallel-commoncrawl.tgz, training-parallel-nc-v11.tgz, dev.tgz or "
                            "test-full.tgz) or their unpacked files, anywhere below it.")
    flags.DEFINE_integer("bpe_merges", 32_000, "Joint BPE merges (the reference: 32,000).")
    flags.DEFINE_integer("max_length", 50, "Discard training pairs with a side longer than this many tokens, <s> and "
                         "</s> included (the reference: 50; 75 allowed).")
    flags.DEFINE_integer("num_shards", 100, "Training TFRecord shards (every worker reads them all and takes its rows "
                         "of each global batch).")
    flags.DEFINE_integer("seed", 0, "Seed of the shard shuffle.")
    flags.DEFINE_integer("threads", None, "Processes for tokenisation and BPE (default: all cores).")


def main(argv):
    del argv
    cli.run_or_report(prepare, FLAGS.raw_dir, FLAGS.output_dir, merges=FLAGS.bpe_merges, max_length=FLAGS.max_length,
                      num_shards=FLAGS.num_shards, seed=FLAGS.seed, threads=FLAGS.threads, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
    define_flags()
    entry.run(main)
