"""python -m data_prep.wmt --raw_dir=R --output_dir=D: WMT17 En-De -> the MLPerf translation dataset.

Reads the official WMT material from R, as downloaded archives (.tgz / .tar.gz / .tar) or their unpacked folders,
anywhere below R (files are found by their names inside the archives):
  training corpora, aligned plain text, one sentence a line:
    europarl        europarl-v7.de-en.{en,de}          training-parallel-europarl-v7.tgz (training/)
    commoncrawl     commoncrawl.de-en.{en,de}          training-parallel-commoncrawl.tgz
    news_commentary news-commentary-v12.de-en.{en,de}  training-parallel-nc-v12.tgz (training/)
    rapid           rapid2016.de-en.{en,de}            rapid2016.tgz
  test set newstest2014, SGML (newstest2014-deen-src.en.sgm + newstest2014-deen-ref.de.sgm, in dev.tgz or
  test-full.tgz) or plain text (newstest2014.en + newstest2014.de).
The MLPerf reference trains on europarl + commoncrawl + news_commentary (4,590,101 pairs, the default --corpora);
rapid is read when listed.

As the reference (mlcommons/training translation/tensorflow/transformer, data_download.py and process_data.py, v0.5
and v0.6): lines are stripped and every pair is kept, empty sides included (the reference encodes an empty line as
[EOS]; its 4,590,101 pairs are every line of the three corpora); pairs whose longer side (subwords + EOS) exceeds
--max_length (256) are discarded here, where the reference's training input filters them on every read
(utils/dataset.py, _filter_max_length), so training sees the same pairs. --drop_empty drops pairs with an empty side
and --max_ratio (off by default) pairs whose word counts differ by more than that factor: neither is the reference's.
The test set is never cleaned.

Vocabulary (--vocab_kind): `subword`, the default, is the reference's tensor2tensor SubwordTextEncoder
(mlperf_keras/inputs/subword.py): token counts on the reference's sample of the raw training files (about 1e6
characters spread over each of the six files), subwords kept at min_count 6 (--subword_min_count; 0 searches for the
size nearest 32,768 as the reference's --search), which on WMT17 gives the reference's 33,708 entries; --vocab_file
takes an existing vocabulary in the reference's format instead (e.g. the reference's own
vocab.translate_ende_wmt32k.32768.subwords, shipped from v0.6). `unigram` (33,708 pieces) or `bpe` (GNMT, 32,000)
learn a sentencepiece model on a --vocab_sample of the cleaned training text instead (not the reference's
segmentation: open division only for the Transformer).

Both sides are encoded (EOS = 1 appended, 0 = padding), shuffled with --seed into --num_shards TFRecord shards
(the reference writes 100 shards round-robin and shuffles each one unseeded), each listed in the manifest with its
pair-length histogram; the test source is encoded into one eval shard (with line indices) and the German references
are written as newstest2014.de beside it for BLEU. The reference's BLEU reference file is tensorflow/models'
official/transformer/test_data/newstest2014.de (translation/download_data.sh) with md5
f6c3818b477e4a25cad68b61cc883c17 (translation/verify_dataset.sh): the md5 of what we write is logged and recorded in
the manifest (source.test_reference_md5, source.test_reference_is_the_reference_file), and so is the source's against
the reference's newstest2014.en (dabf51a9c02b2235632f3cee75c72d49). Everything lands atomically with the manifest.
"""
from __future__ import annotations

import hashlib
import os
import tarfile
import time

import numpy as np
from absl import app, flags

from data_prep import cli
from data_prep.wmt_common import check_corpora_and_shards, read_raw_corpus, write_eval_set, write_test_sgm
from mlperf_keras import entry
from mlperf_keras.inputs.manifest import DataError, StagedOutput

CORPORA = {  # name -> (file stem inside the archive, the archive WMT distributes it in)
    "europarl": ("europarl-v7.de-en", "training-parallel-europarl-v7.tgz"),
    "commoncrawl": ("commoncrawl.de-en", "training-parallel-commoncrawl.tgz"),
    "news_commentary": ("news-commentary-v12.de-en", "training-parallel-nc-v12.tgz"),
    "rapid": ("rapid2016.de-en", "rapid2016.tgz"),
}
REFERENCE_CORPORA = ("europarl", "commoncrawl", "news_commentary")
VOCAB_KINDS = ("subword", "unigram", "bpe")   # subword: the reference's SubwordTextEncoder
SENTENCEPIECE_KINDS = ("unigram", "bpe")
# md5 of the reference's newstest2014 files (mlcommons/training translation/verify_dataset.sh, v0.5/v0.6)
REFERENCE_TEST_MD5 = {"en": "dabf51a9c02b2235632f3cee75c72d49", "de": "f6c3818b477e4a25cad68b61cc883c17"}


# ---------------------------------------------------------------------------------------------------------------------
# Cleaning, vocabulary, encoding

def clean_pairs(en: list[str], de: list[str], max_ratio: float = 0.0, drop_empty: bool = False):
    """(drop_empty) drop pairs with an empty side, and (max_ratio > 0) pairs whose word counts differ by more than
    max_ratio. The Transformer reference does neither: its defaults keep every pair."""
    keep_en, keep_de, empty, ratio = [], [], 0, 0
    for a, b in zip(en, de):
        if drop_empty and (not a or not b):
            empty += 1
            continue
        if max_ratio > 0:
            na, nb = len(a.split()), len(b.split())
            if max(na, nb) > max_ratio * min(na, nb):  # an empty side (kept above) counts 0 words
                ratio += 1
                continue
        keep_en.append(a)
        keep_de.append(b)
    return keep_en, keep_de, {"dropped_empty": empty, "dropped_ratio": ratio}


def build_subword_vocabulary(raw_files: list[str], path: str, min_count: int, vocab_file: str | None, log) -> None:
    """The reference's SubwordTextEncoder vocabulary, written to `path` in the reference's format: built from the
    reference's token sample of raw_files (min_count 0: the reference's bisection toward 32,768), or vocab_file's."""
    from mlperf_keras.inputs import subword

    if vocab_file:
        encoder = subword.SubwordTextEncoder.from_file(vocab_file)
        subword.save_vocabulary(path, encoder.subwords)
        log(f"  {len(encoder):,} subwords from {vocab_file}")
        return
    if min_count < 0:
        raise DataError(f"--subword_min_count={min_count}: expected 0 (search) or a positive count")
    counts = subword.count_tokens(raw_files)
    log(f"  {len(counts):,} distinct tokens in the reference's sample (about 1e6 characters of each of "
        f"{len(raw_files)} files)")
    subwords = subword.build_subwords(counts, min_count=min_count or None, log=log)
    subword.save_vocabulary(path, subwords)


def text_md5(lines: list[str]) -> str:
    """md5 of the lines as a file of one line each, "\n"-terminated (how newstest2014.* are written)."""
    return hashlib.md5("".join(line + "\n" for line in lines).encode("utf-8")).hexdigest()


def train_vocabulary(text_files: list[str], model_prefix: str, vocab_size: int, kind: str, sample: int, seed: int,
                     threads: int, byte_fallback: bool) -> str:
    import sentencepiece as spm

    if kind not in SENTENCEPIECE_KINDS:
        raise DataError(f"--vocab_kind={kind!r}: expected one of {', '.join(VOCAB_KINDS)}")
    spm.set_random_generator_seed(seed)
    spm.set_min_log_level(1)
    log_path = model_prefix + ".log"
    try:
        with open(log_path, "w") as log_file:  # sentencepiece's chatter goes here, not to the terminal
            spm.SentencePieceTrainer.train(
                input=text_files, model_prefix=model_prefix, vocab_size=vocab_size, model_type=kind,
                character_coverage=1.0, byte_fallback=byte_fallback, normalization_rule_name="identity",
                pad_id=0, eos_id=1, unk_id=2, bos_id=-1, input_sentence_size=sample, shuffle_input_sentence=True,
                num_threads=threads, max_sentence_length=1 << 16, logstream=log_file)
    except (RuntimeError, OSError) as e:
        raise DataError(f"learning a {vocab_size}-entry {kind} vocabulary on {', '.join(text_files)} failed: "
                        f"{str(e).strip().splitlines()[-1]} (a small corpus needs a smaller --vocab_size)") from None
    return model_prefix + ".model"


def encode_pairs(vocab, en: list[str], de: list[str], max_length: int, threads: int, chunk: int = 100_000):
    """Flat int32 ids + lengths of both sides (EOS appended), without pairs longer than max_length."""
    flats, lens = {"en": [], "de": []}, {"en": [], "de": []}
    dropped = 0
    for lo in range(0, len(en), chunk):
        src = vocab.encode(en[lo:lo + chunk], num_threads=threads)
        tgt = vocab.encode(de[lo:lo + chunk], num_threads=threads)
        keep = [i for i, (s, t) in enumerate(zip(src, tgt)) if max(len(s), len(t)) <= max_length]
        dropped += len(src) - len(keep)
        for side, seqs in (("en", src), ("de", tgt)):
            kept = [seqs[i] for i in keep]
            lens[side].append(np.fromiter((len(s) for s in kept), dtype=np.int64, count=len(kept)))
            flats[side].append(np.fromiter((t for s in kept for t in s), dtype=np.int32,
                                           count=int(lens[side][-1].sum())))
    out = {side: (np.concatenate(flats[side]) if flats[side] else np.zeros(0, np.int32),
                  np.concatenate(lens[side]) if lens[side] else np.zeros(0, np.int64)) for side in flats}
    return out, dropped


# ---------------------------------------------------------------------------------------------------------------------
# The command

def prepare(raw_dir: str, output_dir: str, corpora=REFERENCE_CORPORA, vocab_kind: str = "subword",
            vocab_size: int = 33_708, max_length: int = 256, max_ratio: float = 0.0, num_shards: int = 100,
            seed: int = 0, vocab_sample: int = 2_000_000, threads: int | None = None, byte_fallback: bool = True,
            workload: str = "transformer", overwrite: bool = False, log=print, subword_min_count: int = 6,
            vocab_file: str | None = None, drop_empty: bool = False) -> dict:
    from mlperf_keras.inputs import text, vocabulary

    if vocab_kind not in VOCAB_KINDS:
        raise DataError(f"--vocab_kind={vocab_kind!r}: expected one of {', '.join(VOCAB_KINDS)}")
    if vocab_file and vocab_kind != "subword":
        raise DataError(f"--vocab_file is a subword vocabulary (the reference's format); --vocab_kind={vocab_kind} "
                        f"learns its own")
    threads = threads or os.cpu_count() or 1
    check_corpora_and_shards(corpora, CORPORA, num_shards)
    t0 = time.time()
    with StagedOutput(output_dir, overwrite=overwrite) as out:
        corpus = read_raw_corpus(raw_dir, out, output_dir, corpora, CORPORA, log)
        en, de, test_src, test_ref = corpus.en, corpus.de, corpus.test_src, corpus.test_ref
        raw_pairs = len(en)
        en, de, dropped = clean_pairs(en, de, max_ratio, drop_empty)
        empty_side_pairs = sum(1 for a, b in zip(en, de) if not a or not b)  # kept, as the reference keeps them
        log(f"cleaned: {len(en):,} of {raw_pairs:,} pairs kept ({dropped})")
        if not en:
            raise DataError(f"{raw_dir}: no training pair left after cleaning")

        t1 = time.time()
        if vocab_kind == "subword":
            # The reference samples the raw corpus files (inputs, then targets), before they are compiled into one.
            raw_files = [corpus.files[f"{CORPORA[c][0]}.{lang}"] for lang in ("en", "de") for c in corpora]
            vocab_name = "vocab.subwords"
            how = f"from {vocab_file}" if vocab_file else f"min_count {subword_min_count or '(searched)'}"
            log(f"building the reference's subword vocabulary (tensor2tensor SubwordTextEncoder, {how})")
            build_subword_vocabulary(raw_files, out.path(vocab_name), subword_min_count, vocab_file, log)
            tokenizer = "subword"
        else:
            text_files = []
            for lang, lines in (("en", en), ("de", de)):
                path = os.path.join(corpus.work_dir, f"train.{lang}")
                with open(path, "w", encoding="utf-8", newline="\n") as f:
                    f.write("\n".join(lines) + "\n")
                text_files.append(path)
            log(f"learning a shared {vocab_kind} vocabulary of {vocab_size:,} entries (sentencepiece, sample "
                f"{vocab_sample:,} sentences, {threads} threads)")
            model_path = train_vocabulary(text_files, os.path.join(corpus.work_dir, "spm"), vocab_size, vocab_kind,
                                          vocab_sample, seed, threads, byte_fallback)
            vocab_name = f"vocab.{vocab_kind}.{vocab_size}.model"
            os.replace(model_path, out.path(vocab_name))
            tokenizer = "sentencepiece"
        vocab = vocabulary.open_vocabulary(out.path(vocab_name), tokenizer)
        log(f"  {len(vocab):,} entries in {time.time() - t1:.0f} s")

        t1 = time.time()
        encoded, dropped_long = encode_pairs(vocab, en, de, max_length, threads)
        eval_ids = vocab.encode(test_src, num_threads=threads)
        if hasattr(vocab, "close"):
            vocab.close()
        log(f"  encoded in {time.time() - t1:.0f} s ({threads} processes)")
        del en, de
        src_flat, src_len = encoded["en"]
        tgt_flat, tgt_len = encoded["de"]
        pairs = len(src_len)
        if pairs == 0:
            raise DataError(f"{raw_dir}: every training pair is longer than --max_length={max_length} subwords")
        log(f"encoded {pairs:,} pairs ({dropped_long:,} longer than {max_length} subwords discarded)")

        src_off = np.concatenate([[0], np.cumsum(src_len)])
        tgt_off = np.concatenate([[0], np.cumsum(tgt_len)])
        order = np.random.default_rng(seed).permutation(pairs)
        num_shards = min(num_shards, pairs)
        import tensorflow as tf

        for k, rows in enumerate(np.array_split(order, num_shards)):
            name = f"train-{k:05d}-of-{num_shards:05d}.tfrecord"
            with tf.io.TFRecordWriter(out.path(name)) as writer:
                for i in rows:
                    writer.write(text.serialize_pair(src_flat[src_off[i]:src_off[i + 1]].tolist(),
                                                     tgt_flat[tgt_off[i]:tgt_off[i + 1]].tolist()))
            out.add(name, rows=len(rows), split="train",
                    lengths=text.length_histogram(np.maximum(src_len[rows], tgt_len[rows]), max_length))
            if (k + 1) % max(1, num_shards // 10) == 0 or k + 1 == num_shards:
                log(f"  wrote train shard {k + 1}/{num_shards}")

        write_eval_set(out, eval_ids, test_ref)
        test_md5 = {"en": text_md5(test_src), "de": text_md5(test_ref)}
        same = {lang: test_md5[lang] == REFERENCE_TEST_MD5[lang] for lang in test_md5}
        for lang in ("en", "de"):
            log(f"newstest2014.{lang} as read: md5 {test_md5[lang]}, "
                + ("the reference's file" if same[lang] else
                   f"not the reference's file (md5 {REFERENCE_TEST_MD5[lang]}); BLEU against it may differ"))
        out.add(vocab_name, split="vocab")

        counts = {"train_pairs": int(pairs), "eval_sentences": len(test_src), "vocab_size": len(vocab),
                  "raw_pairs": raw_pairs, "dropped_empty": dropped["dropped_empty"],
                  "dropped_ratio": dropped["dropped_ratio"], "dropped_long": int(dropped_long),
                  "empty_side_pairs": empty_side_pairs,
                  "max_length": max_length}
        manifest = out.commit(
            workload, "wmt17-en-de", counts,
            options={"corpora": list(corpora), "vocab_kind": vocab_kind,
                     "vocab_size": vocab_size if tokenizer == "sentencepiece" else None,
                     "max_length": max_length, "max_ratio": max_ratio, "num_shards": num_shards, "seed": seed,
                     "vocab_sample": vocab_sample, "byte_fallback": byte_fallback, "tokenizer": tokenizer,
                     "subword_min_count": subword_min_count, "vocab_file": vocab_file, "drop_empty": drop_empty,
                     "pad_id": text.PAD_ID, "eos_id": text.EOS_ID},
            source={"corpora": corpus.per_corpus, "test_source": corpus.test_src_path,
                    "test_reference": corpus.test_ref_path,
                    "test_source_md5": test_md5["en"], "test_reference_md5": test_md5["de"],
                    "test_source_is_the_reference_file": same["en"],
                    "test_reference_is_the_reference_file": same["de"]})
    log(f"prepared {output_dir} in {time.time() - t0:.0f} s: {counts}")
    return manifest


# ---------------------------------------------------------------------------------------------------------------------
# Small corpora in the official layout (the demo and the tests)

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vi", "so", "pe", "du", "ga", "fi", "ho", "ze", "wa", "ji"]


def _words(rng, count):
    words = set()
    while len(words) < count:
        words.add("".join(rng.choice(_SYLLABLES, size=int(rng.integers(1, 4)))))
    return sorted(words)


def write_demo_raw(raw_dir: str, num_pairs: int = 20_000, num_test: int = 200, task: str = "copy", seed: int = 0,
                   vocabulary: int = 48, min_words: int = 3, max_words: int = 10, archives: bool = False,
                   words: list[str] | None = None, word_weights=None, sentence_words=None) -> None:
    """A small parallel corpus in the WMT17 file layout: the three reference corpora (split num_pairs among them)
    and newstest2014 as SGML. English sentences are random words; German is the same words (task "copy"), in
    reverse order ("reverse"), or each word translated by a fixed dictionary ("dictionary").
    With archives=True they are packed as the .tgz files WMT distributes.
    words: the English words (default: `vocabulary` made-up ones); word_weights: their probabilities (default:
    equal); sentence_words: a function rng -> words in a sentence (default: uniform in [min_words, max_words])."""
    rng = np.random.default_rng(seed)
    english = _words(rng, vocabulary) if words is None else np.asarray(words)  # an array: rng.choice converts lists
    german = dict(zip(english, rng.permutation([w + "en" for w in english])))

    def pair():
        count = int(rng.integers(min_words, max_words + 1)) if sentence_words is None else int(sentence_words(rng))
        words = list(rng.choice(english, size=count, p=word_weights))
        if task == "copy":
            out = words
        elif task == "reverse":
            out = words[::-1]
        elif task == "dictionary":
            out = [german[w] for w in words]
        else:
            raise ValueError(f"unknown task {task!r}")
        return " ".join(words) + " .", " ".join(out) + " ."

    layout = {"europarl": ("training-parallel-europarl-v7", "training"),
              "commoncrawl": ("training-parallel-commoncrawl", ""),
              "news_commentary": ("training-parallel-nc-v12", "training")}
    sizes = np.array_split(np.arange(num_pairs), len(layout))
    os.makedirs(raw_dir, exist_ok=True)
    staging = os.path.join(raw_dir, "_unpacked") if archives else raw_dir
    for (corpus, (folder, inner)), rows in zip(layout.items(), sizes):
        stem = CORPORA[corpus][0]
        directory = os.path.join(staging, folder, inner)
        os.makedirs(directory, exist_ok=True)
        pairs = [pair() for _ in rows]
        for lang, side in (("en", 0), ("de", 1)):
            with open(os.path.join(directory, f"{stem}.{lang}"), "w", encoding="utf-8") as f:
                f.write("".join(p[side] + "\n" for p in pairs))
    test = [pair() for _ in range(num_test)]
    dev = os.path.join(staging, "dev", "dev")
    write_test_sgm(dev, test)
    if archives:
        import shutil

        for corpus, (folder, inner) in layout.items():
            with tarfile.open(os.path.join(raw_dir, CORPORA[corpus][1]), "w:gz") as tar:
                tar.add(os.path.join(staging, folder, inner), arcname=inner or ".")
        with tarfile.open(os.path.join(raw_dir, "dev.tgz"), "w:gz") as tar:
            tar.add(dev, arcname="dev")
        shutil.rmtree(staging)


FLAGS = flags.FLAGS


def define_flags():
    cli.define_common_flags("Folder holding the WMT17 archives (training-parallel-europarl-v7.tgz, "
                            "training-parallel-commoncrawl.tgz, training-parallel-nc-v12.tgz, [rapid2016.tgz], "
                            "dev.tgz or test-full.tgz) or their unpacked files, anywhere below it.")
    # absl's --help lists only the main module's own flags: show --raw_dir/--output_dir too.
    flags.adopt_module_key_flags(cli)
    flags.DEFINE_list("corpora", list(REFERENCE_CORPORA), f"Training corpora, of: {', '.join(CORPORA)}. The MLPerf "
                      "reference uses europarl, commoncrawl, news_commentary.")
    flags.DEFINE_enum("vocab_kind", "subword", list(VOCAB_KINDS), "subword: the Transformer reference's "
                      "tensor2tensor SubwordTextEncoder (closed division); unigram or bpe: a sentencepiece model "
                      "(bpe for GNMT).")
    flags.DEFINE_integer("vocab_size", 33_708, "--vocab_kind=unigram or bpe: entries of the sentencepiece vocabulary "
                         "(unigram 33,708); --vocab_kind=subword sizes itself by --subword_min_count.")
    flags.DEFINE_integer("subword_min_count", 6, "--vocab_kind=subword: keep subwords counted at least this often in "
                         "the token sample (the reference's 6, 33,708 entries on WMT17); 0 searches for the size "
                         "nearest 32,768 as the reference's --search.")
    flags.DEFINE_string("vocab_file", None, "--vocab_kind=subword: use this vocabulary (one quoted subword a line, "
                        "e.g. the reference's vocab.translate_ende_wmt32k.32768.subwords) instead of building one.")
    flags.DEFINE_bool("drop_empty", False, "Drop pairs with an empty side (the Transformer reference keeps them).")
    flags.DEFINE_integer("max_length", 256, "Discard pairs whose longer side exceeds this many subwords (with EOS).")
    flags.DEFINE_float("max_ratio", 0.0, "Drop pairs whose word counts differ by more than this factor (0: off, as "
                       "the Transformer reference).")
    flags.DEFINE_integer("num_shards", 100, "Training TFRecord shards (the reference: 100); a worker reads every "
                         "N-th shard, so use at least as many as workers.")
    flags.DEFINE_integer("seed", 0, "Seed of the shard shuffle and the vocabulary's sentence sample.")
    flags.DEFINE_integer("vocab_sample", 2_000_000, "Sentences sampled to learn the vocabulary (0: all).")
    flags.DEFINE_integer("threads", None, "Threads (processes for the subword encoder) for the vocabulary and "
                         "encoding (default: all cores).")
    flags.DEFINE_bool("byte_fallback", True, "Spell characters outside the vocabulary as UTF-8 bytes (lossless).")
    flags.DEFINE_enum("workload", "transformer", ["transformer", "gnmt"], "The workload the data is prepared for; "
                      "gnmt runs data_prep.wmt_gnmt (WMT16, Moses + BPE; --max_length defaults to 50 there).")


# The vocabulary flags only one kind of preparation reads; data_prep.wmt_gnmt (--workload=gnmt: Moses + subword-nmt
# BPE sized by its --bpe_merges) reads none of them, nor the Transformer's cleaning options.
SENTENCEPIECE_ONLY_FLAGS = ("vocab_size", "vocab_sample", "byte_fallback")
SUBWORD_ONLY_FLAGS = ("subword_min_count", "vocab_file")
NOT_FOR_GNMT_FLAGS = ("vocab_kind", *SENTENCEPIECE_ONLY_FLAGS, *SUBWORD_ONLY_FLAGS, "max_ratio", "drop_empty")


def refuse_flags_that_do_not_apply(values) -> None:
    """Every flag given acts, or the command stops here, before any work, naming what it does not apply to."""
    def given(names):
        return [f"--{name}" for name in names if values[name].present]

    if values.workload == "gnmt":
        unused = given(NOT_FOR_GNMT_FLAGS)
        if unused:
            raise app.UsageError(f"{', '.join(unused)}: not for --workload=gnmt, whose data_prep.wmt_gnmt uses Moses "
                                 f"and subword-nmt BPE (its size: python -m data_prep.wmt_gnmt --bpe_merges=N)")
        return
    unused, kind = (given(SUBWORD_ONLY_FLAGS), "subword") if values.vocab_kind in SENTENCEPIECE_KINDS else \
        (given(SENTENCEPIECE_ONLY_FLAGS), "unigram or bpe")
    if unused:
        raise app.UsageError(f"{', '.join(unused)}: only for --vocab_kind={kind}, not --vocab_kind={values.vocab_kind} "
                             f"(--workload={values.workload})")


def main(argv):
    del argv
    refuse_flags_that_do_not_apply(FLAGS)
    if FLAGS.workload == "gnmt":  # WMT16 with Moses + subword-nmt BPE: data_prep/wmt_gnmt.py
        from data_prep import wmt_gnmt

        cli.run_or_report(wmt_gnmt.prepare, FLAGS.raw_dir, FLAGS.output_dir, corpora=FLAGS.corpora,
                          max_length=FLAGS.max_length if FLAGS["max_length"].present else 50,
                          num_shards=FLAGS.num_shards, seed=FLAGS.seed, threads=FLAGS.threads,
                          overwrite=FLAGS.overwrite)
        return
    cli.run_or_report(prepare, FLAGS.raw_dir, FLAGS.output_dir, corpora=FLAGS.corpora, vocab_kind=FLAGS.vocab_kind,
                      vocab_size=FLAGS.vocab_size, max_length=FLAGS.max_length, max_ratio=FLAGS.max_ratio,
                      num_shards=FLAGS.num_shards, seed=FLAGS.seed, vocab_sample=FLAGS.vocab_sample,
                      threads=FLAGS.threads, byte_fallback=FLAGS.byte_fallback, workload=FLAGS.workload,
                      overwrite=FLAGS.overwrite, subword_min_count=FLAGS.subword_min_count,
                      vocab_file=FLAGS.vocab_file, drop_empty=FLAGS.drop_empty)


if __name__ == "__main__":
    define_flags()
    entry.run(main)
