"""Mozilla Common Voice release: a TSV (`validated.tsv` by default) and `clips/*.mp3`.

Speaker = `client_id`, text = `sentence`, id = the clip's file stem; `up_votes`, `down_votes`, `age`,
`gender`, `accents` (and `variant`, `sentence_domain` when present) are kept as manifest metadata.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import InputError
from core.data.importers import Candidate, ImportOptions, table_lines
from core.data.manifest import Reject

REQUIRED_COLUMNS = ("client_id", "path", "sentence")
META_COLUMNS = ("up_votes", "down_votes", "age", "gender", "accents", "variant", "sentence_domain")
VOTE_COLUMNS = ("up_votes", "down_votes")


def _table(source: Path, options: ImportOptions) -> Path:
    if source.is_file():
        return source
    if Path(options.tsv).name != options.tsv or options.tsv in ("", ".", ".."):
        raise InputError(f"--tsv {options.tsv!r}: name a table of the release folder by its file name "
                         "(validated.tsv, train.tsv, dev.tsv, test.tsv), not a path.")
    table = source / options.tsv
    if not table.is_file():
        present = ", ".join(sorted(p.name for p in source.glob("*.tsv"))) or "none"
        raise InputError(f"{table}: not found (TSV files here: {present}). Pass the release folder and choose the table "
                         "with --tsv (validated.tsv, train.tsv, dev.tsv, test.tsv).")
    return table


def _meta(fields: dict[str, str]) -> dict[str, object]:
    meta: dict[str, object] = {}
    for name in META_COLUMNS:
        value = fields.get(name, "").strip()
        if name in VOTE_COLUMNS:
            meta[name] = int(value) if value.isdigit() else None
        elif name in fields:
            meta[name] = value
    return meta


def collect(source: Path, options: ImportOptions) -> tuple[list[Candidate], list[Reject]]:
    """Return candidates and rejects from a Common Voice release folder (or one of its TSV files).

    Clips are looked up in `clips/` beside the TSV. The language is `--language`, else the `locale`
    column, else empty. Raises InputError when the TSV is missing or lacks a required column.
    """
    table = _table(source, options)
    clips = table.parent / "clips"
    rejects: list[Reject] = []
    lines = table_lines(table, rejects)
    number, first = next(lines, (0, ""))
    if number != 1:
        raise InputError(f"{table}: no readable header line. A Common Voice TSV starts with client_id, path, sentence, ….")
    header = first.split("\t")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{table}: column(s) {', '.join(missing)} missing from the header ({', '.join(header)}). "
                         "Pass a Common Voice TSV (validated.tsv, train.tsv, dev.tsv or test.tsv).")
    candidates: list[Candidate] = []
    for number, line in lines:
        values = line.split("\t")
        if len(values) != len(header):
            rejects.append(Reject(str(table), number, f"expected {len(header)} tab-separated fields, found {len(values)}"))
            continue
        fields = dict(zip(header, values))
        name = fields["path"].strip()
        if not name or not fields["client_id"].strip():
            rejects.append(Reject(str(table), number, "empty path" if not name else "empty client_id"))
            continue
        candidates.append(
            Candidate(
                source=str(table),
                line=number,
                id=Path(name).stem,
                audio=clips / name,
                text=fields["sentence"],
                speaker=fields["client_id"].strip(),
                language=options.language or fields.get("locale", "").strip(),
                meta=_meta(fields),
            )
        )
    return candidates, rejects
