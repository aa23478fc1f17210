"""Row arithmetic: the text rows a checkpoint has, and what moving it to another tokenizer does.

`plan_row_change` is the one answer to "can this checkpoint of this family go from the base
tokenizer to the new one, and how many rows will it have?": the prefix check (the new tokenizer
keeps every base piece at its id), the rows the base needs, the rows after, and the shrink guard.
`embeddings extend`, the doctor and the dashboard's Embeddings tab all ask here, so the tab shows
exactly what Extend will do or refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core.errors import InputError
from core.families import Family, detect_family, get_family, rows_for
from core.tokenizers.tokenizer import Tokenizer
from core.tokenizers.vocab import first_difference, require_prefix_extension


@dataclass(frozen=True)
class RowChange:
    """What extending a checkpoint of `family` from a base tokenizer to a new one does to its text rows."""

    family: Family
    base_size: int
    new_size: int
    rows_before: int
    rows_after: int

    @property
    def kept(self) -> int:
        """Return how many base token rows are copied bit for bit."""
        return min(self.base_size, self.new_size)

    @property
    def added(self) -> int:
        """Return rows after minus rows before (negative when the checkpoint shrinks)."""
        return self.rows_after - self.rows_before

    @property
    def extra_rows_moved(self) -> dict[str, int] | None:
        """Return where the family's trailing extra rows move ({"from", "to"}), or None when it has none."""
        if not self.family.row_offset:
            return None
        return {"from": self.rows_before - self.family.row_offset, "to": self.rows_after - self.family.row_offset}


def text_rows(family: Family, state_dict: Mapping[str, Any]) -> int:
    """Return the number of text rows (the embedding's first dimension) of a `family` state dict.

    Raises InputError naming the family's keys the state dict lacks.
    """
    missing = [k for k in family.text_keys if k not in state_dict]
    if missing:
        raise InputError(f"the checkpoint lacks the {family.name} key(s) {', '.join(missing)}; pass the right --family.")
    return int(state_dict[family.embedding_key].shape[0])


def plan_row_change(
    family: Family, base: Tokenizer, new: Tokenizer, rows_before: int, allow_truncate: bool = False
) -> RowChange:
    """Return the row change of moving a `family` checkpoint with `rows_before` text rows from `base` to `new`.

    Raises InputError when `new` does not keep every base piece at its id (below its own size
    when truncating), when the checkpoint has fewer rows than `base` needs, or when the result
    would have fewer rows without `allow_truncate`.
    """
    if new.size >= base.size or not allow_truncate:
        require_prefix_extension(base, new)
    else:
        diff = first_difference(base, new, limit=new.size)
        if diff is not None:
            raise InputError(
                f"{new.path}: id {diff} is {new.piece(diff)!r} but the base {base.path} has {base.piece(diff)!r}; "
                "a truncated tokenizer must keep the base pieces at their ids."
            )
    need_base = rows_for(family, base.size)
    if rows_before < need_base:
        raise InputError(
            f"the checkpoint has {rows_before} text rows but the {family.name} family needs {need_base} for the "
            f"{base.size}-id base tokenizer {base.path}; pass the tokenizer the checkpoint was made for as --base-tokenizer."
        )
    rows_after = rows_for(family, new.size)
    if rows_after < rows_before and not allow_truncate:
        raise InputError(
            f"the checkpoint has {rows_before} text rows and the {new.size}-id tokenizer {new.path} needs "
            f"{rows_after}: that drops {rows_before - rows_after} rows. Pass --allow-truncate to shrink."
        )
    return RowChange(family, base.size, new.size, rows_before, rows_after)


def plan_checkpoint_rows(
    state_dict: Mapping[str, Any],
    meta: Mapping[str, Any] | None,
    base: Tokenizer,
    new: Tokenizer,
    family: str = "auto",
    allow_truncate: bool = False,
) -> RowChange:
    """Return the row change `embeddings extend` makes to a loaded checkpoint (family `auto` = detected).

    Raises InputError for an unknown layout or family, missing text keys, and everything
    `plan_row_change` refuses.
    """
    fam = detect_family(state_dict, meta, base.size) if family == "auto" else get_family(family)
    return plan_row_change(fam, base, new, text_rows(fam, state_dict), allow_truncate)
