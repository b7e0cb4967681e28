"""The translation workloads' vocabularies: token ids <-> text, 0 = padding, 1 = EOS.

open_vocabulary picks the Transformer's by the prepared manifest's options.tokenizer (tensor2tensor's subword list,
inputs/subword.py, or a sentencepiece model); BpeVocabulary is GNMT's subword-nmt file with the reference's
detokenisation.
"""
from __future__ import annotations

from mlperf_keras.inputs.manifest import DataError

PAD_ID = 0
EOS_ID = 1


def open_vocabulary(path: str, tokenizer: str):
    """The prepared dataset's vocabulary, by the manifest's options.tokenizer: "subword" (tensor2tensor's
    SubwordTextEncoder, inputs/subword.py) or "sentencepiece"."""
    if tokenizer == "subword":
        from mlperf_keras.inputs.subword import SubwordTextEncoder

        return SubwordTextEncoder.from_file(path)
    if tokenizer == "sentencepiece":
        return Vocabulary(path)
    raise DataError(f"{path}: unknown tokenizer {tokenizer!r} in the manifest (prepare the data again)")


class Vocabulary:
    """A sentencepiece model: text <-> ids, 0 = padding, 1 = EOS."""

    kind = "sentencepiece"

    def __init__(self, path: str):
        import sentencepiece as spm

        try:
            self.sp = spm.SentencePieceProcessor(model_file=path)
        except (OSError, RuntimeError) as e:
            raise DataError(f"{path}: not a sentencepiece model ({e})") from None

    def __len__(self):
        return self.sp.get_piece_size()

    def encode(self, lines, num_threads: int = 1) -> list[list[int]]:
        """Ids of each line, EOS appended."""
        return [ids + [EOS_ID] for ids in self.sp.encode(list(lines), num_threads=num_threads)]

    def decode(self, ids) -> str:
        return self.sp.decode([int(t) for t in ids if t not in (PAD_ID, EOS_ID)])


class BpeVocabulary:
    """A subword-nmt vocabulary file (one token a line, ids by line): ids -> text as the GNMT reference's
    Tokenizer.detokenize (join, remove the "@@ " separators, <pad>, <s> and </s>; <unk> stays) then Moses
    detokenisation (sacremoses, for the reference's detokenizer.perl) for sacrebleu. The reference runs
    detokenizer.perl without -l (seq2seq/inference/inference.py at 69dbe8b, run_detokenizer), so with its default
    language, English, whatever the target language: lang="en". Ids past the file are the reference's padding
    tokens madeupword0000, ... (a vocabulary padded to a multiple of 8 under fp16)."""

    def __init__(self, path: str, lang: str = "en", dropped=(0, 2, 3)):
        with open(path, encoding="utf-8") as f:
            self.tokens = [line.rstrip("\n") for line in f]
        self.dropped = set(dropped)
        from sacremoses import MosesDetokenizer

        self.detokenizer = MosesDetokenizer(lang=lang)

    def __len__(self):
        return len(self.tokens)

    def token(self, i: int) -> str:
        return self.tokens[i] if i < len(self.tokens) else f"madeupword{i - len(self.tokens):04d}"

    def subwords(self, ids) -> str:
        words = " ".join(self.token(int(t)) for t in ids if int(t) not in self.dropped)
        return words.replace("@@ ", "").replace("@@", "").strip()

    def decode(self, ids) -> str:
        return self.detokenizer.detokenize(self.subwords(ids).split())
