"""data_prep.wmt: WMT17 archives or folders -> cleaned, subword-encoded, sharded TFRecords with a manifest."""
from __future__ import annotations

import os
import shutil
import tarfile

import numpy as np
import pytest

from data_prep import wmt, wmt_common
from mlperf_keras.inputs import text, vocabulary
from mlperf_keras.inputs.manifest import DataError, read_manifest, verify_files
from tests.conftest import run_cli

SMALL = dict(vocab_kind="unigram", vocab_size=64, max_length=40, num_shards=3, byte_fallback=False, threads=1)
TREE = {**SMALL, "vocab_size": 40}  # small_tree's copy corpus has fewer distinct pieces


def prepared_corpus(tmp_path_factory, task="copy", num_pairs=6000, num_test=120, vocab_size=48, max_length=32,
                    num_shards=4):
    """A generated corpus in the official layout (as .tgz archives), prepared once per session and task."""
    root = tmp_path_factory.getbasetemp() / f"wmt_{task}_{num_pairs}"
    out = root / "prepared"
    if not (out / "manifest.json").exists():
        wmt.write_demo_raw(str(root / "raw"), num_pairs=num_pairs, num_test=num_test, task=task, seed=11,
                           archives=True)
        wmt.prepare(str(root / "raw"), str(out), vocab_size=vocab_size, max_length=max_length,
                    num_shards=num_shards, byte_fallback=False, threads=1, log=lambda _: None)
    return str(out)


def read_pairs(path):
    import tensorflow as tf

    return [(s.tolist(), t.tolist()) for s, t in tf.data.TFRecordDataset(path).map(text.parse_pair).as_numpy_iterator()]


@pytest.fixture(scope="module")
def dictionary_raw(tmp_path_factory):
    raw = tmp_path_factory.mktemp("wmt_dict") / "raw"
    wmt.write_demo_raw(str(raw), num_pairs=1500, num_test=50, task="dictionary", seed=3, archives=True)
    return raw


def test_prepares_archives_into_aligned_encoded_shards(dictionary_raw, tmp_path):
    manifest = wmt.prepare(str(dictionary_raw), str(tmp_path / "out"), log=lambda _: None, **SMALL)
    out = tmp_path / "out"
    assert read_manifest(str(out), "transformer") == manifest
    verify_files(str(out), manifest, progress=None)
    counts = manifest["counts"]
    assert counts["raw_pairs"] == 1500 and counts["eval_sentences"] == 50 and counts["vocab_size"] == 64
    assert counts["train_pairs"] == 1500 - counts["dropped_long"] - counts["dropped_empty"]
    train = [f for f in manifest["files"] if f["split"] == "train"]
    assert len(train) == 3 and sum(f["rows"] for f in train) == counts["train_pairs"]
    vocab = vocabulary.Vocabulary(str(out / "vocab.unigram.64.model"))
    seen = 0
    for entry in train:
        pairs = read_pairs(str(out / entry["name"]))
        assert len(pairs) == entry["rows"]
        lengths = [max(len(s), len(t)) for s, t in pairs]
        assert entry["lengths"] == text.length_histogram(lengths, 40)
        for s, t in pairs[:20]:
            assert s[-1] == text.EOS_ID and t[-1] == text.EOS_ID and 0 not in s + t
            en, de = vocab.decode(s).split(), vocab.decode(t).split()
            # the dictionary task appends "en" to every English word (then permutes the mapping): sides aligned
            assert len(en) == len(de) and en[-1] == de[-1] == "." and all(w.endswith("en") for w in de[:-1])
            seen += 1
    assert seen == 60
    # eval: one record per test sentence, in order, whose decoding is the SGML source text; references kept raw
    sources, indices, references, detokenize = text.load_eval_set(str(out), manifest)
    assert list(indices) == list(range(50)) and len(references) == 50
    assert manifest["source"]["test_source"] == f"{dictionary_raw / 'dev.tgz'}:dev/{wmt_common.TEST_SGM[0]}"
    with tarfile.open(dictionary_raw / "dev.tgz") as tar:
        tar.extractall(tmp_path / "dev", filter="data")
    test_dir = tmp_path / "dev" / "dev"
    assert [detokenize(s) for s in sources] == wmt_common.read_sgm(str(test_dir / wmt_common.TEST_SGM[0]))
    assert references == wmt_common.read_sgm(str(test_dir / wmt_common.TEST_SGM[1]))


def test_unpacked_folders_give_the_same_dataset_as_archives(dictionary_raw, tmp_path):
    unpacked = tmp_path / "unpacked"
    for archive in os.listdir(dictionary_raw):
        with tarfile.open(dictionary_raw / archive) as tar:
            tar.extractall(unpacked / archive.replace(".tgz", ""), filter="data")
    a = wmt.prepare(str(dictionary_raw), str(tmp_path / "a"), log=lambda _: None, **SMALL)
    b = wmt.prepare(str(unpacked), str(tmp_path / "b"), log=lambda _: None, **SMALL)
    data = lambda m: [(f["name"], f["sha256"]) for f in m["files"] if f["split"] != "vocab"]  # noqa: E731
    assert data(a) == data(b) and len(data(a)) == 5
    # the vocabulary model embeds its (temporary) input paths; its pieces are the same
    pieces = [vocabulary.Vocabulary(str(tmp_path / d / "vocab.unigram.64.model")).sp for d in ("a", "b")]
    assert [pieces[0].id_to_piece(i) for i in range(64)] == [pieces[1].id_to_piece(i) for i in range(64)]


def write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def small_tree(root, n=300, extra_en=(), extra_de=(), plain_test=False):
    """An unpacked official layout with hand-written special lines appended to europarl."""
    wmt.write_demo_raw(str(root), num_pairs=n, num_test=20, task="copy", seed=5)
    euro = root / "training-parallel-europarl-v7" / "training"
    for lang, extra in (("en", extra_en), ("de", extra_de)):
        with open(euro / f"europarl-v7.de-en.{lang}", "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in extra))
    if plain_test:
        dev = root / "dev" / "dev"
        for sgm, txt in zip(wmt_common.TEST_SGM, wmt_common.TEST_TXT):
            write(str(dev / txt), wmt_common.read_sgm(str(dev / sgm)))
            os.remove(dev / sgm)
    return root


def test_cleaning_drops_empty_long_and_disproportionate_pairs(tmp_path):
    long = " ".join(["kaloka"] * 60)
    raw = small_tree(tmp_path / "raw", extra_en=["", "ka lo .", "   ", long, "ka ka ka ka ka ka ka ka ."],
                     extra_de=["ka .", "", "lo .", long, "ka ."])
    manifest = wmt.prepare(str(raw), str(tmp_path / "out"), max_ratio=3.0, drop_empty=True, log=lambda _: None,
                           **TREE)
    c = manifest["counts"]
    assert c["raw_pairs"] == 305
    assert c["dropped_empty"] == 3 and c["dropped_ratio"] == 1 and c["dropped_long"] >= 1
    assert c["train_pairs"] == 305 - 3 - 1 - c["dropped_long"]
    hist = np.sum([f["lengths"] for f in manifest["files"] if f["split"] == "train"], axis=0)
    assert len(hist) == 41 and hist.sum() == c["train_pairs"]


def test_plain_text_test_set_and_the_rapid_corpus(tmp_path):
    raw = small_tree(tmp_path / "raw", plain_test=True)
    write(str(raw / "rapid" / "rapid2016.de-en.en"), ["ka lo ."] * 7)
    write(str(raw / "rapid" / "rapid2016.de-en.de"), ["ka lo ."] * 7)
    manifest = wmt.prepare(str(raw), str(tmp_path / "out"), corpora=["europarl", "commoncrawl", "news_commentary",
                                                                      "rapid"], log=lambda _: None, **TREE)
    assert manifest["source"]["corpora"]["rapid"] == 7 and manifest["counts"]["raw_pairs"] == 307
    assert manifest["counts"]["eval_sentences"] == 20
    assert manifest["source"]["test_source"].endswith("newstest2014.en")


def break_misaligned(raw):
    with open(raw / "training-parallel-commoncrawl" / "commoncrawl.de-en.de", "a") as f:
        f.write("one more line\n")
    return "commoncrawl.de-en.en has 100 lines but", "commoncrawl.de-en.de has 101"


def break_missing(raw):
    os.remove(raw / "training-parallel-nc-v12" / "training" / "news-commentary-v12.de-en.de")
    return "corpus news_commentary: found only news-commentary-v12.de-en.en", "training-parallel-nc-v12.tgz"


def break_sgm(raw):
    path = raw / "dev" / "dev" / wmt_common.TEST_SGM[1]
    lines = open(path).read().split("\n")
    lines[5] = lines[5].replace("</seg>", "")
    open(path, "w").write("\n".join(lines))
    return f"{wmt_common.TEST_SGM[1]}:6: malformed SGML segment", "<seg id"


def break_no_test(raw):
    shutil.rmtree(raw / "dev")
    return "test set newstest2014 not found", wmt_common.TEST_SGM[0]


def break_test_counts(raw):
    path = raw / "dev" / "dev" / wmt_common.TEST_SGM[0]
    lines = open(path).read().split("\n")
    del lines[4]
    open(path, "w").write("\n".join(lines))
    return f"{wmt_common.TEST_SGM[0]} has 19 segments but", "has 20"


def break_archive(raw):
    with open(raw / "training-parallel-europarl-v7.tgz", "wb") as f:
        f.write(b"not a tar file at all")
    shutil.rmtree(raw / "training-parallel-europarl-v7")
    return "training-parallel-europarl-v7.tgz: unreadable archive", ""


def break_utf8(raw):
    with open(raw / "training-parallel-commoncrawl" / "commoncrawl.de-en.en", "r+b") as f:
        f.seek(0)
        f.write(b"\xff")
    return "commoncrawl.de-en.en:1: not UTF-8", ""


@pytest.mark.parametrize("breaker", [break_misaligned, break_missing, break_sgm, break_no_test, break_test_counts,
                                     break_archive, break_utf8])
def test_bad_input_is_one_data_error_naming_the_file(tmp_path, breaker):
    raw = small_tree(tmp_path / "raw")
    first, second = breaker(raw)
    with pytest.raises(DataError) as info:
        wmt.prepare(str(raw), str(tmp_path / "out"), log=lambda _: None, **TREE)
    message = str(info.value)
    assert first in message and second in message and "\n" not in message, message
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert os.listdir(tmp_path / "out") == []  # the staging folder is gone too


def test_cli_reports_one_line_and_exit_status_2(tmp_path):
    proc = run_cli("data_prep.wmt", f"--raw_dir={tmp_path / 'nothing'}", f"--output_dir={tmp_path / 'out'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: {tmp_path / 'nothing'}: no such folder"
    proc = run_cli("data_prep.wmt", "--help")
    assert "newstest2014-deen-src.en.sgm" in proc.stdout and "--vocab_kind" in proc.stdout  # absl's --help


def test_vocabulary_too_large_for_the_corpus_is_a_clear_error(tmp_path):
    raw = small_tree(tmp_path / "raw")
    with pytest.raises(DataError, match="Vocabulary size too high .* smaller --vocab_size"):
        wmt.prepare(str(raw), str(tmp_path / "out"), **{**TREE, "vocab_size": 5000}, log=lambda _: None)


def test_default_is_the_reference_subword_vocabulary_and_keeps_empty_pairs(tmp_path, monkeypatch):
    import hashlib

    from mlperf_keras.inputs import subword

    raw = small_tree(tmp_path / "raw", extra_en=["", "Straße_1 \\x café", "ka lo ."], extra_de=["ka .", "", "ka ."])
    dev = raw / "dev" / "dev"
    references = wmt_common.read_sgm(str(dev / wmt_common.TEST_SGM[1]))
    # Pretend our generated references are the reference's file: its md5 is what the manifest must recognise.
    monkeypatch.setitem(wmt.REFERENCE_TEST_MD5, "de", hashlib.md5("".join(r + "\n" for r in references).encode())
                        .hexdigest())
    out = tmp_path / "out"
    manifest = wmt.prepare(str(raw), str(out), max_length=40, num_shards=3, threads=1, log=lambda _: None)
    verify_files(str(out), manifest, progress=None)
    assert manifest["options"]["tokenizer"] == "subword" and manifest["options"]["subword_min_count"] == 6
    # The vocabulary: the reference's algorithm on the reference's sample of the raw files, in its file format.
    corpora = [raw / "training-parallel-europarl-v7" / "training" / "europarl-v7.de-en",
               raw / "training-parallel-commoncrawl" / "commoncrawl.de-en",
               raw / "training-parallel-nc-v12" / "training" / "news-commentary-v12.de-en"]
    expected = subword.build_subwords(subword.count_tokens([f"{c}.{lang}" for lang in ("en", "de") for c in corpora]),
                                      min_count=6)
    lines = (out / "vocab.subwords").read_text(encoding="utf-8").split("\n")[:-1]
    assert lines == [f"'{s}'" for s in expected] and lines[:2] == ["'<pad>'", "'<EOS>'"]
    counts = manifest["counts"]
    assert counts["vocab_size"] == len(expected)
    # Every pair is kept, empty sides too (encoded as [EOS]), as the reference; nothing here is too long.
    assert counts["raw_pairs"] == 303 and counts["dropped_empty"] == 0 and counts["empty_side_pairs"] == 2
    assert counts["dropped_long"] == 0 and counts["train_pairs"] == 303
    vocab = subword.SubwordTextEncoder.from_file(str(out / "vocab.subwords"))
    decoded = sorted((vocab.decode(s), vocab.decode(t)) for f in manifest["files"] if f["split"] == "train"
                     for s, t in read_pairs(str(out / f["name"])))
    raw_pairs = [wmt_common.read_parallel(f"{c}.en", f"{c}.de") for c in corpora]
    assert decoded == sorted(p for en, de in raw_pairs for p in zip(en, de))
    assert ("", "ka .") in decoded and ("Straße_1 \\x café", "") in decoded
    # newstest2014: the md5 of what we wrote, compared with the reference's files.
    written = hashlib.md5((out / "newstest2014.de").read_bytes()).hexdigest()
    assert manifest["source"]["test_reference_md5"] == written == wmt.REFERENCE_TEST_MD5["de"]
    assert manifest["source"]["test_reference_is_the_reference_file"] is True
    assert manifest["source"]["test_source_is_the_reference_file"] is False
    # --vocab_file (e.g. the reference's shipped vocabulary) gives the same dataset.
    again = wmt.prepare(str(raw), str(tmp_path / "again"), max_length=40, num_shards=3, threads=1,
                        vocab_file=str(out / "vocab.subwords"), log=lambda _: None)
    assert [f["sha256"] for f in again["files"]] == [f["sha256"] for f in manifest["files"]]
