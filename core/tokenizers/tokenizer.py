"""One interface over SentencePiece `.model` files and HF `tokenizers` JSON files.

`load_tokenizer(path)` recognises the format by content and returns a `Tokenizer` with
`size`, `encode`, `decode`, `piece`, special ids, `kind` and `fingerprint` (sha256 of the
file bytes). Any file that is neither format, truncated or empty raises InputError, and so does one beyond
the bounds every reader keeps (`core.structured`): a file over MAX_TOKENIZER_BYTES, JSON nested too deep, or
an id at or beyond the vocabulary's own count (a tokenizer's size is what its file holds, never what one
absurd id says). A folder
that `AutoTokenizer` loads (Chatterbox-Turbo's GPT-2 `vocab.json` + `merges.txt`, or a
`tokenizer.json`) is an HF tokenizer too, fingerprinted by the tokenizer.json it amounts to
(`core.tokenizers.hf_folder`).
"""

from __future__ import annotations

import hashlib
import json
import os
from abc import ABC, abstractmethod
from pathlib import Path

from core.errors import InputError
from core.structured import MiB, loads_json, read_bounded

SENTENCEPIECE = "sentencepiece"
HF = "hf"

_BOS_NAMES = ("<s>", "[START]", "<|startoftext|>", "<bos>", "[BOS]")
_EOS_NAMES = ("</s>", "[STOP]", "<|endoftext|>", "<eos>", "[EOS]")
_PAD_NAMES = ("<pad>", "[PAD]")
MAX_TOKENIZER_BYTES = 64 * MiB  # the largest published tokenizers (250k pieces) hold ~35 MB


class Tokenizer(ABC):
    """A loaded tokenizer. Ids run from 0 to `size - 1`."""

    kind: str
    path: Path
    fingerprint: str
    size: int
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Return the ids of `text` without added special tokens."""

    @abstractmethod
    def decode(self, ids: list[int]) -> str:
        """Return the text the ids stand for."""

    @abstractmethod
    def piece(self, token_id: int) -> str:
        """Return the vocabulary string at `token_id`; raises InputError when out of range."""

    def pieces(self) -> list[str]:
        """Return every piece in id order."""
        return [self.piece(i) for i in range(self.size)]

    def spell_piece(self, piece: str) -> list[int]:
        """Return the ids this tokenizer splits the text of a vocabulary piece into (its encoding)."""
        return self.encode(piece)

    def special_ids(self) -> dict[str, int | None]:
        """Return the bos/eos/unk/pad ids (None where the tokenizer defines none)."""
        return {"bos": self.bos_id, "eos": self.eos_id, "unk": self.unk_id, "pad": self.pad_id}

    def _check_id(self, token_id: int) -> None:
        if not 0 <= token_id < self.size:
            raise InputError(f"{self.path}: id {token_id} is outside 0..{self.size - 1}.")


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece model (`.model` protobuf)."""

    kind = SENTENCEPIECE

    def __init__(self, path: Path, data: bytes) -> None:
        import sentencepiece as spm

        self.path = path
        self.fingerprint = hashlib.sha256(data).hexdigest()
        self.processor = spm.SentencePieceProcessor()
        try:
            self.processor.LoadFromSerializedProto(data)
        except (RuntimeError, OSError) as exc:
            raise InputError(
                f"{path}: not a loadable SentencePiece model ({_first_line(exc)}). "
                "The file may be truncated or another format; re-copy or re-train it."
            ) from exc
        self.size = self.processor.GetPieceSize()
        self.bos_id = _none_if_negative(self.processor.bos_id())
        self.eos_id = _none_if_negative(self.processor.eos_id())
        self.unk_id = _none_if_negative(self.processor.unk_id())
        self.pad_id = _none_if_negative(self.processor.pad_id())

    def encode(self, text: str) -> list[int]:
        return list(self.processor.EncodeAsIds(text))

    def decode(self, ids: list[int]) -> str:
        return self.processor.DecodeIds([int(i) for i in ids])

    def piece(self, token_id: int) -> str:
        self._check_id(token_id)
        return self.processor.IdToPiece(int(token_id))

    def pieces(self) -> list[str]:
        return [self.processor.IdToPiece(i) for i in range(self.size)]


class HFTokenizer(Tokenizer):
    """An HF `tokenizers` JSON file. `size` is one past the highest id, added tokens included."""

    kind = HF

    def __init__(self, path: Path, data: bytes) -> None:
        from tokenizers import Tokenizer as RawTokenizer

        self.path = path
        self.fingerprint = hashlib.sha256(data).hexdigest()
        try:
            self.raw = RawTokenizer.from_str(data.decode("utf-8"))
        except Exception as exc:  # tokenizers raises a plain Exception subclass
            raise InputError(
                f"{path}: not a loadable HF tokenizer JSON ({_first_line(exc)}). "
                "Check that it is a complete tokenizer.json."
            ) from exc
        vocab = self.raw.get_vocab(with_added_tokens=True)
        if not vocab:
            raise InputError(f"{path}: the tokenizer has an empty vocabulary.")
        self._id_to_token = {i: t for t, i in vocab.items()}
        self.size = max(self._id_to_token) + 1
        if self.size > len(self._id_to_token):
            raise InputError(f"{path}: id {self.size - 1:,} lies beyond the vocabulary's own {len(self._id_to_token):,} "
                             f"entries (ids run from 0 to {len(self._id_to_token) - 1:,}, none left out); the file is "
                             "damaged or forged. Re-copy or re-train it.")
        self.unk_id = self._find(_unk_names(self.raw))
        self.bos_id = self._find(_BOS_NAMES)
        self.eos_id = self._find(_EOS_NAMES)
        self.pad_id = self._find(_PAD_NAMES)

    def _find(self, names: tuple[str, ...]) -> int | None:
        for name in names:
            token_id = self.raw.token_to_id(name)
            if token_id is not None:
                return token_id
        return None

    def encode(self, text: str) -> list[int]:
        return list(self.raw.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return self.raw.decode([int(i) for i in ids], skip_special_tokens=False)

    def piece(self, token_id: int) -> str:
        self._check_id(token_id)
        return self._id_to_token.get(int(token_id), "")

    @property
    def byte_level(self) -> bool:
        """True when the tokenizer pre-tokenises to bytes (GPT-2's ByteLevel): its pieces are byte strings."""
        pre = self.raw.pre_tokenizer
        return pre is not None and b'"ByteLevel"' in pre.__getstate__()

    def spell_piece(self, piece: str) -> list[int]:
        """Return the ids this tokenizer splits a vocabulary piece into: for a byte-level tokenizer its BPE over the
        piece's bytes (the piece is already in the byte alphabet), else the encoding of the piece's text."""
        if self.byte_level:
            return [token.id for token in self.raw.model.tokenize(piece)]
        return super().spell_piece(piece)


def _unk_names(raw: object) -> tuple[str, ...]:
    model_unk = getattr(getattr(raw, "model", None), "unk_token", None)
    names = ("[UNK]", "<unk>", "<|unk|>")
    return (model_unk, *names) if model_unk else names


def _none_if_negative(value: int) -> int | None:
    return None if value < 0 else int(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def detect_kind(data: bytes, what: str = "tokenizer file") -> str | None:
    """Return `sentencepiece`, `hf` or None for the bytes of a tokenizer file, by content.

    Raises StructureError (naming `what`) for JSON nested beyond what any reader takes."""
    stripped = data.lstrip()
    if stripped.startswith(b"{"):
        try:
            obj = loads_json(data.decode("utf-8"), what)  # nested too deep: StructureError, one line
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        return HF if isinstance(obj, dict) and isinstance(obj.get("model"), dict) else None
    from core.tokenizers.sp_proto import parse_model_proto

    try:
        proto = parse_model_proto(data)
    except InputError:
        return None
    return SENTENCEPIECE if len(proto.pieces) > 0 else None


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Return the tokenizer stored at `path` (SentencePiece model, HF tokenizer JSON, or an HF tokenizer folder).

    Raises InputError when the file is missing, empty, truncated or of another format.
    """
    from core.tokenizers.hf_folder import folder_tokenizer_json, is_tokenizer_folder

    path = Path(path)
    if is_tokenizer_folder(path):
        text = folder_tokenizer_json(path)
        loads_json(text, f"{path}: tokenizer")  # the bounds of every JSON reader
        return HFTokenizer(path, text.encode("utf-8"))
    if not path.is_file():
        raise InputError(f"{path}: tokenizer file not found. Pass the path to a .model or tokenizer .json file "
                         "(or a folder AutoTokenizer loads: tokenizer.json, or vocab.json + merges.txt).")
    data = read_bounded(path, f"{path}: the tokenizer file", MAX_TOKENIZER_BYTES)
    if not data:
        raise InputError(f"{path}: the tokenizer file is empty. Re-copy or re-train it.")
    kind = detect_kind(data, str(path))
    if kind == HF:
        return HFTokenizer(path, data)
    if kind == SENTENCEPIECE:
        return SentencePieceTokenizer(path, data)
    if data.lstrip().startswith(b"{"):
        raise InputError(
            f"{path}: JSON but not an HF tokenizer (no \"model\" section) or truncated. "
            "Pass the tokenizer.json saved by the `tokenizers` library."
        )
    raise InputError(
        f"{path}: neither a SentencePiece model nor an HF tokenizer JSON (or the file is truncated). "
        "Pass a .model file written by SentencePiece or a tokenizer.json."
    )
