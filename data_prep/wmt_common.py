"""What both WMT preparations (data_prep/wmt.py for the Transformer's WMT17, data_prep/wmt_gnmt.py for GNMT's
WMT16) read and write the same way: the raw files found unpacked or inside the archives WMT distributes, the
aligned training corpora, newstest2014 (SGML or plain text), and newstest2014's SGML for generated corpora."""
from __future__ import annotations

import dataclasses
import os
import re
import tarfile

from mlperf_keras.inputs.manifest import DataError

TEST_SGM = ("newstest2014-deen-src.en.sgm", "newstest2014-deen-ref.de.sgm")
TEST_TXT = ("newstest2014.en", "newstest2014.de")
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")
_SEG = re.compile(r"<seg[^>]*>(.*)</seg>")


# ---------------------------------------------------------------------------------------------------------------------
# Finding the raw files

class RawFiles:
    """Finds files by name under raw_dir: unpacked first, then inside archives (extracted once into work_dir)."""

    def __init__(self, raw_dir: str, work_dir: str, output_dir: str | None = None):
        if not os.path.isdir(raw_dir):
            raise DataError(f"{raw_dir}: no such folder")
        self.raw_dir, self.work_dir = raw_dir, work_dir
        self.files, self.archives, self.origin = {}, [], {}
        skip = {os.path.abspath(work_dir), os.path.abspath(output_dir or work_dir)}  # never read our own output
        for root, dirs, names in os.walk(raw_dir):
            dirs[:] = sorted(d for d in dirs if os.path.abspath(os.path.join(root, d)) not in skip
                             and not d.startswith(".staging-"))
            for name in sorted(names):
                path = os.path.join(root, name)
                if name.endswith(ARCHIVE_SUFFIXES):
                    self.archives.append(path)
                else:
                    self.files.setdefault(name, path)

    def describe(self, name: str, path: str) -> str:
        """Where a located file came from: its path, or archive:member."""
        return self.origin.get(name, os.path.abspath(path))

    def locate(self, names) -> dict:
        """name -> path for every name found (unpacked, or extracted from an archive)."""
        found = {n: self.files[n] for n in names if n in self.files}
        missing = set(names) - set(found)
        for archive in self.archives:
            if not missing:
                break
            found.update(self._extract(archive, missing))
            missing -= set(found)
        return found

    def _extract(self, archive: str, wanted: set) -> dict:
        out = {}
        target_dir = os.path.join(self.work_dir, os.path.basename(archive).replace(".", "_"))
        try:
            with tarfile.open(archive, "r:*") as tar:
                for member in tar:
                    name = os.path.basename(member.name)
                    if member.isfile() and name in wanted and name not in out:
                        os.makedirs(target_dir, exist_ok=True)
                        path = os.path.join(target_dir, name)
                        with tar.extractfile(member) as src, open(path, "wb") as dst:
                            while block := src.read(1 << 22):
                                dst.write(block)
                        out[name] = path
                        self.origin[name] = f"{archive}:{member.name}"
        except (tarfile.TarError, OSError, EOFError) as e:
            raise DataError(f"{archive}: unreadable archive ({' '.join(str(e).split())})") from None
        return out


def _missing_corpus_error(raw_dir, name, stem, archive, found):
    have = [f"{stem}.{lang}" for lang in ("en", "de") if f"{stem}.{lang}" in found]
    detail = f"found only {have[0]}" if have else f"neither {stem}.en nor {stem}.de"
    return DataError(f"{raw_dir}: corpus {name}: {detail} (unpacked or inside an archive such as {archive})")


def check_corpora_and_shards(corpora, known: dict, num_shards: int) -> None:
    """The options every WMT preparation shares: corpus names from `known`, at least one shard."""
    unknown = [c for c in corpora if c not in known]
    if unknown or not corpora:
        raise DataError(f"--corpora: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")
    if num_shards < 1:
        raise DataError(f"--num_shards must be at least 1, got {num_shards}")


@dataclasses.dataclass
class RawCorpus:
    """The training pairs (all corpora, in order) and newstest2014 as read from the raw files."""
    en: list
    de: list
    per_corpus: dict       # corpus name -> pairs read
    test_src: list
    test_ref: list
    test_src_path: str
    test_ref_path: str
    files: dict            # file name ("europarl-v7.de-en.en", ...) -> its path (unpacked or extracted)
    work_dir: str          # scratch folder inside the staged output (extracted archives; removed with it)


def read_raw_corpus(raw_dir: str, out, output_dir: str, corpora, known: dict, log) -> RawCorpus:
    """Locate (unpacked or inside archives, RawFiles) and read the training corpora, named in `known` as name ->
    (file stem, archive), and newstest2014; one-line errors for missing or misaligned files. Archives are extracted
    into the scratch folder _work of the StagedOutput out."""
    work_dir = out.path("_work")
    os.makedirs(work_dir)
    raw = RawFiles(raw_dir, work_dir, output_dir)
    wanted = [f"{known[c][0]}.{lang}" for c in corpora for lang in ("en", "de")] + [*TEST_SGM, *TEST_TXT]
    found = raw.locate(wanted)
    for c in corpora:
        stem, archive = known[c]
        if f"{stem}.en" not in found or f"{stem}.de" not in found:
            raise _missing_corpus_error(raw_dir, c, stem, archive, found)
    test_src, test_ref, test_src_path, test_ref_path = read_test_set(raw, found)
    en, de, per_corpus = [], [], {}
    for c in corpora:
        stem = known[c][0]
        a, b = read_parallel(found[f"{stem}.en"], found[f"{stem}.de"])
        per_corpus[c] = len(a)
        en.extend(a)
        de.extend(b)
        log(f"read {c}: {len(a):,} pairs ({raw.describe(f'{stem}.en', found[f'{stem}.en'])})")
    return RawCorpus(en, de, per_corpus, test_src, test_ref, test_src_path, test_ref_path, found, work_dir)


# ---------------------------------------------------------------------------------------------------------------------
# Reading

def read_lines(path: str) -> list[str]:
    """Lines split on \\n only (Common Crawl holds other Unicode line separators inside sentences), stripped."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for lineno, raw in enumerate(lines, start=1):
        try:
            out.append(raw.decode("utf-8").strip())
        except UnicodeDecodeError as e:
            raise DataError(f"{path}:{lineno}: not UTF-8 ({e.reason})") from None
    return out


def read_parallel(en_path: str, de_path: str) -> tuple[list[str], list[str]]:
    en, de = read_lines(en_path), read_lines(de_path)
    for path, lines in ((en_path, en), (de_path, de)):
        if not lines:
            raise DataError(f"{path}: empty corpus (zero lines): a failed download or extraction; fetch it again")
    if len(en) != len(de):
        raise DataError(f"{en_path} has {len(en):,} lines but {de_path} has {len(de):,}: the sides are not aligned")
    return en, de


def read_sgm(path: str) -> list[str]:
    """The <seg> texts of a WMT SGML file, in order, whitespace collapsed (sacrebleu's reading of these files)."""
    segments = []
    for lineno, line in enumerate(read_lines(path), start=1):
        if "<seg" not in line:
            continue
        match = _SEG.search(line)
        if match is None:
            raise DataError(f"{path}:{lineno}: malformed SGML segment (expected <seg id=..>text</seg>): {line[:80]!r}")
        segments.append(re.sub(r"\s+", " ", match.group(1).strip()))
    if not segments:
        raise DataError(f"{path}: no <seg> elements: not a WMT SGML test set")
    return segments


def read_test_set(raw: RawFiles, found: dict) -> tuple[list[str], list[str], str, str]:
    """(source sentences, reference sentences, where each came from)."""
    if all(n in found for n in TEST_SGM):
        names, read = TEST_SGM, read_sgm
    elif all(n in found for n in TEST_TXT):
        names, read = TEST_TXT, read_lines
    else:
        raise DataError(f"{raw.raw_dir}: test set newstest2014 not found: need {' + '.join(TEST_SGM)} (in dev.tgz or "
                        f"test-full.tgz, or unpacked) or {' + '.join(TEST_TXT)}")
    src_path, ref_path = (found[n] for n in names)
    src, ref = read(src_path), read(ref_path)
    if len(src) != len(ref):
        raise DataError(f"{src_path} has {len(src):,} segments but {ref_path} has {len(ref):,}: not aligned")
    return src, ref, raw.describe(names[0], src_path), raw.describe(names[1], ref_path)


# ---------------------------------------------------------------------------------------------------------------------
# Writing the prepared eval set

def write_eval_set(out, eval_ids, references) -> None:
    """Into the StagedOutput out: the encoded test source as one eval shard (each record its line index and ids) and
    the German references as read (newstest2014.de, for BLEU), both listed in the manifest."""
    import tensorflow as tf

    from mlperf_keras.inputs import text

    name = "eval-00000-of-00001.tfrecord"
    with tf.io.TFRecordWriter(out.path(name)) as writer:
        for index, ids in enumerate(eval_ids):
            writer.write(text.serialize_eval(index, ids))
    out.add(name, rows=len(eval_ids), split="eval")
    with open(out.path("newstest2014.de"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(line + "\n" for line in references))
    out.add("newstest2014.de", rows=len(references), split="reference")


# ---------------------------------------------------------------------------------------------------------------------
# Writing (generated corpora in the official layout)

def write_test_sgm(directory: str, pairs) -> None:
    """newstest2014's source and reference SGML files (TEST_SGM) in directory, from (English, German) pairs."""
    os.makedirs(directory, exist_ok=True)
    _write_sgm(os.path.join(directory, TEST_SGM[0]), "src", "en", [p[0] for p in pairs])
    _write_sgm(os.path.join(directory, TEST_SGM[1]), "ref", "de", [p[1] for p in pairs])


def _write_sgm(path, kind, lang, lines):
    """A newstest-style SGML file (the "fake SGML" WMT used until 2020)."""
    header = ('<srcset setid="newstest2014" srclang="any">' if kind == "src"
              else f'<refset setid="newstest2014" srclang="any" trglang="{lang}">')
    with open(path, "w", encoding="utf-8") as f:
        f.write(header + f'\n<doc sysid="{kind}" docid="demo" genre="news" origlang="en">\n<p>\n')
        for i, line in enumerate(lines, start=1):
            f.write(f'<seg id="{i}">{line}</seg>\n')
        f.write(f"</p>\n</doc>\n</{'srcset' if kind == 'src' else 'refset'}>\n")
