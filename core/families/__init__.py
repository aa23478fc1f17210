"""Model families: where a checkpoint keeps its text vocabulary and how many rows it needs.

A `Family` names the embedding, head weight and head bias keys of a state dict and the number of
rows beyond the tokenizer size (`row_offset`; those extra rows sit at the end and are never
indexed). Adding a family is one entry in `FAMILIES`. A family whose text keys another family
shares (Chatterbox-Turbo's GPT-2 T3 and the multilingual Llama T3 both have `text_emb.weight`)
is told apart by its marker keys: with `markers_required` it is a candidate only when they are present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from core.errors import InputError


@dataclass(frozen=True)
class Family:
    """One checkpoint layout: its text keys, row offset and the keys that identify it."""

    name: str
    embedding_key: str = "text_embedding.weight"
    head_weight_key: str | None = "text_head.weight"  # None: no text head (CSM's lm_head scores speech)
    head_bias_key: str | None = "text_head.bias"
    row_offset: int = 0
    task: str | None = None
    marker_prefixes: tuple[str, ...] = field(default_factory=tuple)
    markers_required: bool = False
    description: str = ""

    @property
    def text_keys(self) -> tuple[str, ...]:
        """Return the keys whose first dimension is the text row count."""
        keys = (self.embedding_key, self.head_weight_key, self.head_bias_key)
        return tuple(k for k in keys if k is not None)

    def matches_keys(self, keys: set[str]) -> bool:
        """Return True when every text key of this family is among `keys`."""
        return all(k in keys for k in self.text_keys)

    def has_markers(self, keys: set[str]) -> bool:
        """Return True when some key starts with one of this family's marker prefixes."""
        return any(k.startswith(p) for k in keys for p in self.marker_prefixes)


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            name="linguaforge",
            description="LinguaForge's own models: rows = tokenizer size",
        ),
        Family(
            name="indextts",
            row_offset=1,
            task="tts",
            marker_prefixes=("mel_pos_embedding.", "text_pos_embedding.", "conditioning_encoder.", "perceiver_encoder."),
            description="IndexTTS / IndexTTS2 GPT: rows = tokenizer size + 1 (extra row at the end)",
        ),
        Family(
            name="chatterbox",
            embedding_key="text_emb.weight",
            head_bias_key=None,
            task="tts",
            description="Chatterbox T3: rows = tokenizer size, head without bias",
        ),
        Family(
            name="chatterbox-turbo",
            embedding_key="text_emb.weight",
            head_bias_key=None,
            task="tts",
            marker_prefixes=("tfmr.h.", "tfmr.wpe."),
            markers_required=True,
            description="Chatterbox-Turbo / Nano T3 (GPT-2 backbone): rows = tokenizer size, head without bias",
        ),
        Family(
            name="csm",
            embedding_key="embed_text_tokens.weight",
            head_weight_key=None,
            head_bias_key=None,
            task="tts",
            marker_prefixes=("backbone_model.", "depth_decoder."),
            markers_required=True,
            description="Sesame CSM (transformers): rows = tokenizer size, no text head",
        ),
    )
}

_EMBEDDING_HINTS = ("emb", "wte", "head", "lm_", "vocab", "token")


def get_family(name: str) -> Family:
    """Return the registered family `name`; raises InputError listing the known families."""
    family = FAMILIES.get(name)
    if family is None:
        raise InputError(f"unknown model family {name!r}; known families: {', '.join(FAMILIES)}.")
    return family


def rows_for(family: Family, tokenizer_size: int) -> int:
    """Return how many text rows a checkpoint of `family` needs for a tokenizer of `tokenizer_size` ids."""
    return tokenizer_size + family.row_offset


def families_with_rows(rows: int, tokenizer_size: int) -> list[Family]:
    """Return the families whose row count for `tokenizer_size` equals `rows`."""
    return [f for f in FAMILIES.values() if rows_for(f, tokenizer_size) == rows]


def embedding_like_keys(keys: set[str]) -> list[str]:
    """Return the keys that look like vocabulary tensors (embeddings, heads), sorted."""
    return sorted(k for k in keys if any(h in k.lower() for h in _EMBEDDING_HINTS))


@dataclass(frozen=True)
class FamilyDecision:
    """A detected family and the reason it was chosen (what the doctor prints)."""

    family: Family
    reason: str


def _refuse_ambiguous(candidates: list[Family], rows: int, tokenizer_size: int | None) -> InputError:
    names = ", ".join(f.name for f in candidates)
    sizes = "; ".join(f"{f.name} needs {tokenizer_size + f.row_offset}" for f in candidates) if tokenizer_size else ""
    against = (f" against the {tokenizer_size}-id tokenizer ({sizes})" if tokenizer_size else
               " and no tokenizer size was given to compare them with")
    return InputError(
        f"cannot tell the checkpoint's family: its keys fit {names}, and its {rows} text rows decide nothing"
        f"{against}. Pass --family {candidates[0].name} (or another of {names})."
    )


def explain_family(
    state_dict: Mapping[str, Any], metadata: Mapping[str, Any] | None = None, tokenizer_size: int | None = None
) -> FamilyDecision:
    """Return the family of a checkpoint and why, from its metadata, keys, markers and rows.

    Metadata naming a family wins. A checkpoint without LinguaForge metadata is never
    `linguaforge` (our trainer always writes the record). Among the key-compatible families left,
    marker keys decide (IndexTTS's `mel_pos_embedding.*`, `conditioning_encoder.*`, …), then the
    text rows against `tokenizer_size` (12,001 rows for a 12,000-id tokenizer is IndexTTS).
    Raises InputError when the metadata names an unknown family, no family's keys are present,
    or several families still fit (asking for --family).
    """
    if metadata and metadata.get("family"):
        return FamilyDecision(get_family(str(metadata["family"])), "recorded in the checkpoint's LinguaForge metadata")
    keys = set(state_dict)
    candidates = [f for f in FAMILIES.values() if f.matches_keys(keys) and (not f.markers_required or f.has_markers(keys))]
    if not candidates:
        seen = embedding_like_keys(keys) or sorted(keys)[:20]
        expected = "; ".join(f"{f.name}: {', '.join(f.text_keys)}" for f in FAMILIES.values())
        raise InputError(
            f"unknown checkpoint layout: no family's text keys are present. Embedding-like keys seen: "
            f"{', '.join(seen) or 'none'}. Expected ({expected}). Pass --family or add a family to core/families."
        )
    notes = []
    if metadata is None:
        foreign = [f for f in candidates if f.name != "linguaforge"]
        if len(foreign) < len(candidates):
            notes.append("no LinguaForge metadata, so not linguaforge")
        candidates = foreign
        if not candidates:
            raise InputError(
                "the checkpoint has LinguaForge's text keys but no LinguaForge metadata, and no foreign family "
                "fits its keys. Pass --family linguaforge if LinguaForge wrote it without its record."
            )
    if len(candidates) == 1:
        keys_of = ", ".join(candidates[0].text_keys)
        return FamilyDecision(candidates[0], "; ".join([*notes, f"its keys ({keys_of}) fit only this family"]))
    marked = [f for f in candidates if f.marker_prefixes and f.has_markers(keys)]
    if len(marked) == 1:
        prefixes = ", ".join(p + "*" for p in marked[0].marker_prefixes if any(k.startswith(p) for k in keys))
        return FamilyDecision(marked[0], "; ".join([*notes, f"its marker keys ({prefixes}) are present"]))
    rows = int(state_dict[candidates[0].embedding_key].shape[0])
    if tokenizer_size is not None:
        fitting = [f for f in candidates if rows_for(f, tokenizer_size) == rows]
        if len(fitting) == 1:
            reason = f"{rows} text rows = {tokenizer_size}-id tokenizer {fitting[0].row_offset:+d}"
            return FamilyDecision(fitting[0], "; ".join([*notes, reason]))
    raise _refuse_ambiguous(candidates, rows, tokenizer_size)


def detect_family(
    state_dict: Mapping[str, Any], metadata: Mapping[str, Any] | None = None, tokenizer_size: int | None = None
) -> Family:
    """Return the family of a checkpoint (see `explain_family` for the rules and what it raises)."""
    return explain_family(state_dict, metadata, tokenizer_size).family
