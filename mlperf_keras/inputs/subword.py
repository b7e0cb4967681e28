"""tensor2tensor's SubwordTextEncoder, as the MLPerf Transformer reference builds and applies it (no tensor2tensor).

The reference (mlcommons/training, translation/tensorflow/transformer/utils/tokenizer.py, unchanged from v0.5 to
the repository's cleanup in e6f45a4d; data_download.py / process_data.py call it) does, and so does this module:
- Tokens: a line is split into maximal runs of alphanumeric characters (Unicode categories L* and N*) and runs of
  other characters; a run that is exactly one space is dropped unless it opens (or, being the last, closes) the line.
- Escaping: "\\" -> "\\\\", "_" -> "\\u", a character outside the alphabet (or "\\n") -> "\\<code point>;", and "_"
  appended to end the token. Decoding splits the concatenated subwords on "_" and undoes the escapes; a space is
  put back between two neighbouring alphanumeric tokens only.
- Vocabulary: token counts from a sample of each training file (count_tokens: about file_byte_limit = 1e6
  characters per file, one line taken every size / 2e6 lines, so spread over the file); then 4 iterations of:
  segment every token with the current subwords (greedy longest match), count every substring that starts at a
  segment boundary, keep substrings counted at least min_count times, longest first, each kept one subtracting its
  count from its prefixes; the alphabet's characters are always kept; order by count (then string), descending,
  behind the reserved tokens <pad> (0) and <EOS> (1). The reference passes min_count = 6 (_TRAIN_DATA_MIN_COUNT)
  with target 32,768 and threshold 327, which on WMT17 gives the 33,708 entries of the vocabulary file the
  reference ships from v0.6 (vocab/vocab.translate_ende_wmt32k.32768.subwords); min_count None searches
  1..1000 by bisection for the size closest to the target, as the reference's --search.
- Encoding: greedy longest match of each escaped token, EOS (1) appended by the caller.
- The vocabulary file: one subword a line between single quotes (the reference's _save_vocab_file), so the
  reference's own file loads here and ours loads there.

Differences: which characters are alphanumeric comes from this Python's unicodedata (3.11: Unicode 14.0), the
reference's from the Python 3 it ran on (3.5/3.6: Unicode 8.0/9.0), and WMT text hardly touches the characters added
since; where no substring reaches min_count the reference fails in its next iteration (max length -1), we go on with
characters (see _select_subwords). Encoding a corpus uses worker processes (encode(num_threads=N)) and a token cache.
"""
from __future__ import annotations

import collections
import os
import re
import unicodedata

PAD, EOS = "<pad>", "<EOS>"
RESERVED_TOKENS = (PAD, EOS)
PAD_ID, EOS_ID = 0, 1
ESCAPE_CHARS = frozenset("\\_u;0123456789")
_UNESCAPE = re.compile(r"\\u|\\\\|\\([0-9]+);")
_UNDEFINED_UNICODE = "\u3013"
MIN_MIN_COUNT, MAX_MIN_COUNT = 1, 1000   # the reference's bisection range for min_count
REFERENCE_MIN_COUNT = 6                   # data_download.py / process_data.py: _TRAIN_DATA_MIN_COUNT
REFERENCE_TARGET_SIZE = 32_768            # _TARGET_VOCAB_SIZE
REFERENCE_THRESHOLD = 327                 # _TARGET_THRESHOLD
REFERENCE_FILE_BYTE_LIMIT = 1e6           # Subtokenizer.init_from_files' file_byte_limit


# ---------------------------------------------------------------------------------------------------------------------
# Tokens and escaping

# Maximal runs of alphanumeric characters and of other characters. In Python's re, [^\\W_] is exactly the Unicode
# categories L* and N* that the reference tests character by character (tests/test_subword.py checks every code point).
_TOKEN_RUNS = re.compile(r"[^\W_]+|[\W_]+")


def is_alphanumeric(char: str) -> bool:
    return unicodedata.category(char)[0] in "LN"


def split_tokens(text: str) -> list[str]:
    """The reference's _split_string_to_tokens."""
    runs = _TOKEN_RUNS.findall(text)
    if len(runs) < 3 or " " not in runs:
        return runs
    last = len(runs) - 1
    return [t for i, t in enumerate(runs) if t != " " or i == 0 or i == last]


def join_tokens(tokens: list[str]) -> str:
    """The reference's _join_tokens_to_string: a space only between two alphanumeric tokens."""
    out = []
    prev_alnum = False
    for i, token in enumerate(tokens):
        alnum = is_alphanumeric(token[0])
        if i > 0 and prev_alnum and alnum:
            out.append(" ")
        out.append(token)
        prev_alnum = alnum
    return "".join(out)


def escape_token(token: str, alphabet) -> str:
    token = token.replace("\\", "\\\\").replace("_", "\\u")
    return "".join(c if c in alphabet and c != "\n" else f"\\{ord(c)};" for c in token) + "_"


def _unescape_match(m) -> str:
    if m.group(1) is None:
        return "_" if m.group(0) == "\\u" else "\\"
    try:
        return chr(int(m.group(1)))
    except (ValueError, OverflowError):
        return _UNDEFINED_UNICODE


def unescape_token(token: str) -> str:
    return _UNESCAPE.sub(_unescape_match, token)


def split_to_subwords(token: str, subwords, max_length: int) -> list[str]:
    """Greedy longest match of an escaped token (the reference's _split_token_to_subtokens)."""
    out, start, n = [], 0, len(token)
    while start < n:
        for end in range(min(n, start + max_length), start, -1):
            piece = token[start:end]
            if piece in subwords:
                out.append(piece)
                start = end
                break
        else:
            raise ValueError(f"cannot split {token!r} into subwords (a character outside the alphabet)")
    return out


def alphabet_of(strings, reserved=RESERVED_TOKENS) -> set:
    """Characters of the strings, of the reserved tokens, and the escape characters (_generate_alphabet_dict)."""
    alphabet = {c for s in strings for c in s}
    alphabet |= {c for s in reserved for c in s}
    return alphabet | ESCAPE_CHARS


# ---------------------------------------------------------------------------------------------------------------------
# Building the vocabulary

def _read_lines(path: str):
    """Lines split on \\n only, as tf.gfile reads them (Common Crawl holds other Unicode line separators)."""
    with open(path, encoding="utf-8", newline="\n") as f:
        yield from f


def count_tokens(files, file_byte_limit: float = REFERENCE_FILE_BYTE_LIMIT) -> dict:
    """Token counts of the reference's sample of each file: skip size / (2 * limit) lines, take one (stripped),
    until about `file_byte_limit` characters were taken (the budget is checked before a line is taken)."""
    counts = collections.Counter()
    for path in files:
        budget = file_byte_limit
        lines_to_skip = int(os.path.getsize(path) / (budget * 2))
        skipped = 0
        for line in _read_lines(path):
            if skipped < lines_to_skip:
                skipped += 1
                continue
            if budget < 0:
                break
            line = line.strip()
            budget -= len(line)
            skipped = 0
            counts.update(split_tokens(line))
    return dict(counts)


def _count_substrings(token_counts: dict, alphabet, subwords, max_length: int) -> collections.defaultdict:
    """_count_and_gen_subtokens: every substring starting at a boundary of the current segmentation, counted."""
    counts = collections.defaultdict(int)
    for token, count in token_counts.items():
        token = escape_token(token, alphabet)
        pieces = split_to_subwords(token, subwords, max_length)
        start, n = 0, len(token)
        for piece in pieces:
            for end in range(start + 1, n + 1):
                counts[token[start:end]] += count
            start += len(piece)
    return counts


def _select_subwords(counts, min_count: int, alphabet, reserved=RESERVED_TOKENS) -> tuple[list[str], int]:
    """_gen_new_subtoken_list: longest first, a kept subword's count subtracted from its prefixes."""
    buckets = []
    for piece, count in counts.items():
        if count < min_count:
            continue
        while len(buckets) <= len(piece):
            buckets.append(set())
        buckets[len(piece)].add(piece)
    # The reference returns len(buckets) - 1, -1 when no substring reaches min_count, and then fails to segment
    # anything in the next iteration; 1 (characters) gives its result wherever it has one and a bare alphabet there.
    max_length = max(1, len(buckets) - 1)
    candidates = []
    for length in range(len(buckets) - 1, 0, -1):
        # Pieces of one length only change shorter pieces' counts, so the order inside a bucket does not matter.
        for piece in buckets[length]:
            count = counts[piece]
            if count < min_count:
                continue
            if piece not in alphabet and piece not in reserved:
                candidates.append((count, piece))
            for end in range(1, length):
                counts[piece[:end]] -= count
    candidates.extend((counts.get(a, 0), a) for a in alphabet)
    return list(reserved) + [p for _, p in sorted(candidates, reverse=True)], max_length


def generate_subwords(token_counts: dict, alphabet, min_count: int, iterations: int = 4,
                      reserved=RESERVED_TOKENS, log=None) -> list[str]:
    """_generate_subtokens: the subword list (reserved tokens first, then by decreasing count)."""
    subwords = list(reserved) + sorted(alphabet)
    max_length = 1
    for i in range(iterations):
        counts = _count_substrings(token_counts, alphabet, set(subwords), max_length)
        subwords, max_length = _select_subwords(counts, min_count, alphabet, reserved)
        if log:
            log(f"  subwords (min_count {min_count}), iteration {i}: {len(subwords):,} entries")
    return subwords


def build_subwords(token_counts: dict, target_size: int = REFERENCE_TARGET_SIZE,
                   threshold: int = REFERENCE_THRESHOLD, min_count: int | None = REFERENCE_MIN_COUNT,
                   reserved=RESERVED_TOKENS, log=None) -> list[str]:
    """_generate_subtokens_with_target_vocab_size: min_count given -> one build; None -> the reference's bisection
    over 1..1000 (stop within `threshold` of the target; otherwise the closer of the two halves' results)."""
    alphabet = alphabet_of(token_counts, reserved)
    if min_count is not None:
        return generate_subwords(token_counts, alphabet, min_count, reserved=reserved, log=log)

    def bisect(low, high):
        count = (low + high) // 2
        subwords = generate_subwords(token_counts, alphabet, count, reserved=reserved, log=log)
        size = len(subwords)
        if abs(size - target_size) < threshold or low >= high or count < 2:
            return subwords
        other = bisect(count + 1, high) if size > target_size else bisect(low, count - 1)
        return other if abs(len(other) - target_size) < abs(size - target_size) else subwords

    return bisect(MIN_MIN_COUNT, MAX_MIN_COUNT)


def save_vocabulary(path: str, subwords) -> None:
    """One subword a line between single quotes (the reference's file format)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(f"'{s}'\n" for s in subwords)


def load_subwords(path: str, reserved=RESERVED_TOKENS) -> list[str]:
    """The reference's _load_vocab_file: quotes removed, reserved tokens moved to the front."""
    out = []
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            piece = line.strip()[1:-1]
            if piece not in reserved:
                out.append(piece)
    return list(reserved) + out


# ---------------------------------------------------------------------------------------------------------------------
# Encoding and decoding

class SubwordTextEncoder:
    """text <-> ids with a subword list (0 = <pad>, 1 = <EOS>); the interface of inputs.vocabulary.Vocabulary."""

    kind = "subword"

    def __init__(self, subwords):
        self.subwords = list(subwords)
        if tuple(self.subwords[:2]) != RESERVED_TOKENS:
            raise ValueError(f"a subword vocabulary starts with {RESERVED_TOKENS}, not {self.subwords[:2]}")
        self.ids = {s: i for i, s in enumerate(self.subwords)}
        self.alphabet = alphabet_of(self.subwords)
        self.max_length = max(len(s) for s in self.subwords)
        self._cache: dict[str, list[int]] = {}
        self._pool, self._pool_size = None, 0

    @classmethod
    def from_file(cls, path: str) -> "SubwordTextEncoder":
        from mlperf_keras.inputs.manifest import DataError

        try:
            subwords = load_subwords(path)
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: unreadable subword vocabulary ({e})") from None
        if len(subwords) <= len(RESERVED_TOKENS):
            raise DataError(f"{path}: no subwords (expected one quoted subword a line)")
        return cls(subwords)

    def __len__(self):
        return len(self.subwords)

    def token_ids(self, token: str) -> list[int]:
        ids = self._cache.get(token)
        if ids is None:
            pieces = split_to_subwords(escape_token(token, self.alphabet), self.ids, self.max_length)
            ids = [self.ids[p] for p in pieces]
            if len(self._cache) < 1 << 21:
                self._cache[token] = ids
        return ids

    def encode_line(self, line: str, add_eos: bool = True) -> list[int]:
        out, cache = [], self._cache
        for token in split_tokens(line):
            ids = cache.get(token)
            out += self.token_ids(token) if ids is None else ids
        if add_eos:
            out.append(EOS_ID)
        return out

    def encode(self, lines, num_threads: int = 1) -> list[list[int]]:
        """Ids of each line, EOS appended (in worker processes when num_threads > 1 and the lines are many)."""
        lines = list(lines)
        if num_threads <= 1 or len(lines) < 20_000:
            return [self.encode_line(line) for line in lines]
        if self._pool is None or self._pool_size != num_threads:  # one pool for all calls: each keeps its cache
            self.close()
            self._pool, self._pool_size = _worker_pool(self.subwords, num_threads), num_threads
        return _encode_in(self._pool, lines)

    def close(self):
        """Stop the worker processes of encode(num_threads > 1), if any."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def pieces(self, line: str) -> list[str]:
        """The subword strings of a line (without EOS): for inspection and tests."""
        return [self.subwords[i] for i in self.encode_line(line, add_eos=False)]

    def decode(self, ids) -> str:
        """Text of ids; padding, EOS and ids outside the vocabulary are skipped."""
        pieces = "".join(self.subwords[int(i)] for i in ids if len(RESERVED_TOKENS) <= int(i) < len(self.subwords))
        return join_tokens([unescape_token(t) for t in pieces.split("_") if t])


_WORKER_ENCODER: SubwordTextEncoder | None = None


def _init_worker(subwords):
    global _WORKER_ENCODER
    _WORKER_ENCODER = SubwordTextEncoder(subwords)


def _encode_chunk(lines):
    return [_WORKER_ENCODER.encode_line(line) for line in lines]


def _worker_pool(subwords, processes: int):
    import multiprocessing

    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    return context.Pool(processes, initializer=_init_worker, initargs=(subwords,))


def _encode_in(pool, lines: list[str], chunk: int = 5_000):
    parts = pool.map(_encode_chunk, [lines[i:i + chunk] for i in range(0, len(lines), chunk)])
    return [ids for part in parts for ids in part]


__all__ = ["PAD", "EOS", "RESERVED_TOKENS", "REFERENCE_MIN_COUNT", "REFERENCE_TARGET_SIZE", "REFERENCE_THRESHOLD",
           "split_tokens", "join_tokens", "escape_token", "unescape_token", "split_to_subwords", "alphabet_of",
           "count_tokens", "generate_subwords", "build_subwords", "save_vocabulary", "load_subwords",
           "SubwordTextEncoder"]
