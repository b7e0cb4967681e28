"""inputs/subword.py: tensor2tensor's SubwordTextEncoder as the MLPerf Transformer reference's utils/tokenizer.py.

The expected vocabulary below is derived by hand from the reference's algorithm on a two-line corpus:
tokens low x2, lower, lowest (min_count 2). Iteration 1 segments every escaped token ("low_", "lower_", "lowest_")
into characters and counts the substrings from each boundary: l, lo, low, o, ow, w, _ 4 times, low_, lowe, ow_, owe,
w_, we, e twice, the rest once. Kept at >= 2, longest first, each subtracting its count from its prefixes: low_ and
lowe (l, lo, low -> 0), ow_ and owe (o, ow -> 0), w_ and we (w -> 0). Iteration 2 segments low_ | lowe r _ |
lowe s t _, so only substrings from those boundaries count: low_ and lowe twice (l, lo, low -> 0 after them), _ twice,
r, s, t once; iterations 3 and 4 repeat it. Order: count, then string, descending, behind <pad> and <EOS>.
"""
from __future__ import annotations

import sys
import unicodedata

import numpy as np
import pytest

from mlperf_keras.inputs import subword

# The alphabet: the corpus' characters, the reserved tokens' and the escape characters \ _ u ; 0-9.
ZERO_COUNT = ["w", "u", "p", "o", "l", "e", "d", "a", "\\", "S", "O", "E", ">", "<", ";", *"9876543210"]
EXPECTED = ["<pad>", "<EOS>", "lowe", "low_", "_", "t", "s", "r"] + ZERO_COUNT


@pytest.fixture
def tiny_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("low lower\nlow lowest\n", encoding="utf-8")
    return str(path)


def test_vocabulary_of_a_tiny_corpus_is_the_hand_derived_one(tiny_corpus, tmp_path):
    counts = subword.count_tokens([tiny_corpus])
    assert counts == {"low": 2, "lower": 1, "lowest": 1}  # single spaces between words are no tokens
    vocabulary = subword.build_subwords(counts, min_count=2)
    assert vocabulary == EXPECTED
    # The reference's file format: one subword a line in single quotes; loading puts the reserved tokens first.
    path = tmp_path / "vocab"
    subword.save_vocabulary(str(path), vocabulary)
    assert path.read_text(encoding="utf-8").startswith("'<pad>'\n'<EOS>'\n'lowe'\n'low_'\n'_'\n")
    assert subword.load_subwords(str(path)) == EXPECTED


def test_greedy_longest_match_and_escapes_on_known_pieces():
    encoder = subword.SubwordTextEncoder(EXPECTED)
    assert encoder.pieces("low lowest") == ["low_", "lowe", "s", "t", "_"]
    assert encoder.pieces("lower slow") == ["lowe", "r", "_", "s", "low_"]
    # "y" is outside the alphabet: escaped as \121; and spelled with the escape characters.
    assert encoder.pieces("lowly") == ["l", "o", "w", "l", "\\", "1", "2", "1", ";", "_"]
    # "_" -> \u and "\" -> \\ inside a token; "a_b\c" is the runs a | _ | b | \ | c.
    assert encoder.pieces("e_e") == ["e", "_", "\\", "u", "_", "e", "_"]
    assert encoder.pieces("\\") == ["\\", "\\", "_"]
    ids = encoder.encode(["low lowest"])[0]
    assert ids == [3, 2, 6, 5, 4, subword.EOS_ID]


def test_tokens_are_alphanumeric_and_other_runs_without_single_spaces():
    assert subword.split_tokens("Hello, world!") == ["Hello", ", ", "world", "!"]
    assert subword.split_tokens("a b  c") == ["a", "b", "  ", "c"]
    assert subword.split_tokens(" a ") == [" ", "a", " "]  # a single space survives first and last
    assert subword.split_tokens("Straße 12,5€") == ["Straße", "12", ",", "5", "€"]
    assert subword.split_tokens("") == []
    assert subword.join_tokens(["Hello", ", ", "world", "!"]) == "Hello, world!"


def test_the_token_regex_is_the_references_unicode_categories_on_every_code_point():
    """The reference tests each character for the categories L* / N*; we use one regex: the same set."""
    pattern = subword._TOKEN_RUNS
    chars = "".join(map(chr, range(sys.maxunicode)))
    alnum = np.array([unicodedata.category(c)[0] in "LN" for c in chars])
    runs = pattern.findall(chars)
    # Every run is homogeneous and the runs alternate exactly where the category class changes.
    assert "".join(runs) == chars
    changes = np.flatnonzero(alnum[1:] != alnum[:-1]) + 1
    assert np.array_equal(np.cumsum([len(r) for r in runs])[:-1], changes)


@pytest.mark.parametrize("line", ["low lowest, slow!", "Straße 😀 — «x»", "a_b\\c", "tab\there", " lead", "trail ",
                                  "1,5 \\123; é_", "\u2028x", "ab\ncd"])
def test_encode_decode_round_trip_with_unicode_and_escapes(line):
    encoder = subword.SubwordTextEncoder(EXPECTED)
    assert encoder.decode(encoder.encode([line])[0]) == line


def test_round_trip_on_random_unicode_text():
    rng = np.random.default_rng(0)
    alphabet = list("abc xyz_\\;0129 .,ßé€😀\t") + ["\u4e2d", "\u0301"]
    encoder = subword.SubwordTextEncoder(EXPECTED)
    for _ in range(300):
        line = "".join(rng.choice(alphabet, size=int(rng.integers(0, 20))))
        assert encoder.decode(encoder.encode([line])[0]) == line, repr(line)


def test_unescape_of_an_impossible_code_point_is_the_references_placeholder():
    assert subword.unescape_token("a\\99999999;b") == "a\u3013b"
    assert subword.unescape_token("\\u\\\\\\233;") == "_\\é"


def test_sample_takes_one_line_every_size_over_twice_the_budget(tmp_path):
    """The reference's rule by hand: 100 lines of 4 bytes, budget 10 -> skip 400 / 20 = 20 lines, take one (3
    characters off the budget), ... : lines 20, 41, 62 and 83, after which the budget is negative."""
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"a{i:02d}\n" for i in range(100)), encoding="utf-8")
    assert subword.count_tokens([str(path)], file_byte_limit=10) == {"a20": 1, "a41": 1, "a62": 1, "a83": 1}


def test_bisection_finds_the_min_count_nearest_the_target(tiny_corpus):
    """min_count None: the reference's bisection over 1..1000 stops at the first size within the threshold of the
    target: min_count 500 (the bare alphabet, 31 entries) for 31; 500, 250, 125, 62, 31, 15, 7, then 3 for 32."""
    counts = subword.count_tokens([tiny_corpus])
    at3, at500 = subword.build_subwords(counts, min_count=3), subword.build_subwords(counts, min_count=500)
    assert len(at3) == 32 and len(at500) == 31
    assert subword.build_subwords(counts, target_size=31, threshold=1, min_count=None) == at500
    assert subword.build_subwords(counts, target_size=32, threshold=1, min_count=None) == at3


def test_encoder_processes_give_the_single_process_ids():
    encoder = subword.SubwordTextEncoder(EXPECTED)
    lines = ["low lowest", "lower slow", "Straße_1"] * 7000
    try:
        assert encoder.encode(lines, num_threads=2) == encoder.encode(lines)
    finally:
        encoder.close()
