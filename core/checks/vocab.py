"""Vocabulary checks: tokenizer, checkpoint rows, declared vocab, freeze range, fingerprint, new-row provenance."""

from __future__ import annotations

import math

import torch

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.errors import InputError
from core.families import FAMILIES, Family, FamilyDecision, explain_family, families_with_rows, get_family, rows_for
from core.families.rows import text_rows
from core.tokenizers.vocab import require_prefix_extension

RANDOM_NORM_RATIO = 2.0


def family_decision(ctx: DoctorContext, checkpoint) -> FamilyDecision:
    """Return the checkpoint's family and why: --family when given, else detection against the tokenizer size.

    Raises InputError when the family cannot be told (the message asks for --family).
    """
    if ctx.family:
        return FamilyDecision(get_family(ctx.family), "given with --family")
    tok = ctx.tokenizer_or_none()
    return explain_family(checkpoint.state_dict, checkpoint.meta, tok.size if tok is not None else None)


def _told_family(ctx: DoctorContext, checkpoint) -> Family | None:
    """Return the checkpoint's family, None without a checkpoint or when its family cannot be told
    (the `checkpoint.family` check reports that)."""
    if checkpoint is None:
        return None
    try:
        return family_decision(ctx, checkpoint).family
    except InputError:
        return None


def _short(fingerprint: str | None) -> str:
    return (fingerprint or "none")[:16]


@register_check("tokenizer", order=10)
def check_tokenizer(ctx: DoctorContext) -> CheckResult:
    """Return pass when the tokenizer resolves and loads, fail with the reason otherwise."""
    try:
        tok = ctx.tokenizer()
    except InputError as exc:
        return CheckResult(
            "tokenizer", "fail", str(exc),
            "Pass --tokenizer PATH, or set `tokenizer:` in the run config to a .model or tokenizer .json file.",
        )
    return CheckResult(
        "tokenizer", "pass", f"{tok.path} ({ctx.tokenizer_source()}): {tok.kind}, {tok.size} ids."
    )


def _mismatch_fix(ctx: DoctorContext, family: Family, rows: int, need: int, lookalikes: list[Family]) -> str:
    if lookalikes and not ctx.family:
        return f"Pass --family {lookalikes[0].name} if this is that kind of checkpoint."
    truncate = " --allow-truncate" if rows > need else ""
    return (
        f"Rebuild the rows for this tokenizer: python -m core embeddings extend --checkpoint {ctx.checkpoint_path} "
        f"--base-tokenizer <the tokenizer it was made for> --tokenizer {ctx.tokenizer().path} --family {family.name} "
        f"--output <new checkpoint>{truncate}"
    )


@register_check("checkpoint.family", order=15)
def check_family(ctx: DoctorContext) -> CheckResult | None:
    """Return which family the checkpoint is and why; a failure when it cannot be told."""
    checkpoint = ctx.checkpoint()
    if checkpoint is None:
        return None
    try:
        decision = family_decision(ctx, checkpoint)
    except InputError as exc:
        return CheckResult("checkpoint.family", "fail", str(exc), f"Pass --family ({' | '.join(FAMILIES)}).")
    return CheckResult("checkpoint.family", "pass", f"{decision.family.name}: {decision.reason}.")


@register_check("tokenizer.base", order=25)
def check_base_tokenizer(ctx: DoctorContext) -> CheckResult | None:
    """Return whether the tokenizer keeps every piece of the checkpoint's base tokenizer at its id.

    With --base-tokenizer (or a run config's base tokenizer) a tokenizer that is not a prefix
    extension fails. A foreign checkpoint with no record of its tokenizer whose rows fit the
    tokenizer's size only by size gets a warning that spells the coincidence out.
    """
    tok = ctx.tokenizer_or_none()
    if tok is None:
        return None
    if ctx.base_tokenizer_path is not None:
        from core.tokenizers.tokenizer import load_tokenizer

        base = load_tokenizer(ctx.base_tokenizer_path)
        try:
            require_prefix_extension(base, tok)
        except InputError as exc:
            return CheckResult(
                "tokenizer.base", "fail",
                f"{exc} Same size or not, ids of {tok.path.name} mean other pieces than the checkpoint learned.",
                f"Extend the base instead: python -m core tokenizer extend --base {base.path} --corpus … "
                f"(or tokenizer merge for .json), then embeddings extend.",
            )
        grown = tok.size - base.size
        return CheckResult(
            "tokenizer.base", "pass",
            f"{tok.path.name} keeps all {base.size} pieces of the base {base.path.name} at their ids (+{grown} new).",
        )
    checkpoint = ctx.checkpoint_or_none()
    family = _told_family(ctx, checkpoint) if checkpoint is None or checkpoint.meta is None else None
    if family is None:
        return None
    rows = int(checkpoint.state_dict[family.embedding_key].shape[0])
    if rows != rows_for(family, tok.size):
        return None
    return CheckResult(
        "tokenizer.base", "warn",
        f"{ctx.checkpoint_path.name} has {rows} text rows = {tok.size}-id tokenizer {family.row_offset:+d}, but "
        f"nothing records which tokenizer it was trained with: the sizes agree, which does not mean the pieces do "
        f"(a tokenizer trained from scratch to {tok.size} ids gives every id another meaning).",
        "Pass --base-tokenizer with the tokenizer published with the checkpoint (IndexTTS2 bpe.model, Chatterbox "
        "tokenizer JSON) so the doctor can check that yours is a prefix extension of it.",
    )


@register_check("checkpoint.rows", order=20)
def check_rows(ctx: DoctorContext) -> CheckResult | None:
    """Return whether the checkpoint's text rows equal the family's rows for the tokenizer.

    Raises InputError when the checkpoint does not load or has no known layout.
    """
    checkpoint = ctx.checkpoint()
    tok = ctx.tokenizer_or_none()
    if checkpoint is None or tok is None:
        return None
    family = family_decision(ctx, checkpoint).family
    sd = checkpoint.state_dict
    try:
        rows = text_rows(family, sd)
    except InputError as exc:
        raise InputError(f"{ctx.checkpoint_path}: {exc}") from None
    uneven = {k: int(sd[k].shape[0]) for k in family.text_keys if int(sd[k].shape[0]) != rows}
    if uneven:
        shapes = ", ".join(f"{k} has {n}" for k, n in uneven.items())
        return CheckResult(
            "checkpoint.rows", "fail",
            f"{ctx.checkpoint_path}: {family.embedding_key} has {rows} rows but {shapes}.",
            "Re-create the checkpoint with `python -m core embeddings extend`, which resizes all text tensors together.",
        )
    need = rows_for(family, tok.size)
    if rows == need:
        return CheckResult(
            "checkpoint.rows", "pass",
            f"{rows} rows = tokenizer size {tok.size} + {family.row_offset} ({family.name} family).",
        )
    lookalikes = [f for f in families_with_rows(rows, tok.size) if f.name != family.name]
    offset = rows - tok.size
    looks = f" rows = size {offset:+d}: this is an {lookalikes[0].name}-family checkpoint." if lookalikes else (
        f" rows = size {offset:+d}, but the {family.name} family's offset is {family.row_offset:+d}."
    )
    recorded = (checkpoint.meta or {}).get("tokenizer_size")
    made_for = f" Its metadata says it was made for a {recorded}-id tokenizer." if recorded else ""
    amount = f"{rows - need} too many" if rows > need else f"{need - rows} too few"
    return CheckResult(
        "checkpoint.rows", "fail",
        f"{ctx.checkpoint_path}: {rows} rows, but the {family.name} family needs {need} for the {tok.size}-id "
        f"tokenizer {tok.path.name} ({amount});{looks}{made_for}",
        _mismatch_fix(ctx, family, rows, need, lookalikes),
    )


@register_check("config.declared_vocab", order=30)
def check_declared_vocab(ctx: DoctorContext) -> CheckResult | None:
    """Return whether a declared vocab size agrees with the tokenizer.

    In a run config of LinguaForge's own models a stale number is a warning (our trainer sizes
    models from the tokenizer and never reads it); in a published family's run config, or given on
    its own (--declared-vocab, some other trainer's number), a disagreement fails.
    """
    tok = ctx.tokenizer_or_none()
    if ctx.declared_vocab is None or tok is None:
        return None
    if ctx.declared_vocab == tok.size:
        return CheckResult("config.declared_vocab", "pass", f"declared vocab {ctx.declared_vocab} = tokenizer size.")
    if ctx.run_config is None:
        return CheckResult(
            "config.declared_vocab", "fail",
            f"declared vocab {ctx.declared_vocab} disagrees with the tokenizer's {tok.size} ids: a trainer that "
            f"sizes its model from that number builds {ctx.declared_vocab} rows and fails on the first id at or "
            f"above {ctx.declared_vocab}.",
            f"Set the number to {tok.size} in the config that declares it; for an IndexTTS2 config.yaml or a "
            "Chatterbox/T3 config run doctor --target-config FILE, or embeddings extend --write-config FILE.",
        )
    where = f" in {ctx.config_path}" if ctx.config_path else ""
    if ctx.run_config is not None and ctx.run_config.family != "linguaforge":
        return CheckResult(
            "config.declared_vocab", "fail",
            f"declared vocab {ctx.declared_vocab}{where} disagrees with the tokenizer's {tok.size} ids; "
            f"a {ctx.run_config.family} model is sized from the tokenizer and a disagreeing number is refused, not overridden.",
            f"Remove the vocab size from the config or set it to {tok.size}.",
        )
    return CheckResult(
        "config.declared_vocab", "warn",
        f"declared vocab {ctx.declared_vocab}{where} is stale: the tokenizer has {tok.size} ids. "
        f"Overridden: models are sized from the tokenizer ({tok.size}), never from the declared number.",
        f"Remove the vocab size from the config (n_vocab / number_text_tokens) or set it to {tok.size}.",
    )


def _freeze_until(ctx: DoctorContext) -> tuple[int | None, str]:
    if ctx.freeze_until is not None:
        return ctx.freeze_until, "freeze_until"
    if ctx.run_config is None or ctx.run_config.freeze.mode == "none" or ctx.run_config.freeze.until != "auto":
        return None, ""
    checkpoint = ctx.checkpoint_or_none()
    base = (checkpoint.meta or {}).get("base_size") if checkpoint is not None else None
    return base, "freeze.until auto (checkpoint base_size)"


@register_check("freeze.range", order=40)
def check_freeze_range(ctx: DoctorContext) -> CheckResult | None:
    """Return whether 0 ≤ freeze_until ≤ tokenizer size; larger fails (never clamped), equal warns."""
    tok = ctx.tokenizer_or_none()
    until, source = _freeze_until(ctx)
    if tok is None:
        return None
    if until is None:
        if source and ctx.checkpoint_or_none() is not None:
            return CheckResult(
                "freeze.range", "warn",
                f"freeze.until is auto but {ctx.checkpoint_path} records no base size, so no text row is frozen.",
                "Set freeze.until in the run config to the base tokenizer's size.",
            )
        return None
    if until < 0 or until > tok.size:
        return CheckResult(
            "freeze.range", "fail",
            f"{source} {until} is outside 0..{tok.size}: the tokenizer has {tok.size} ids. It is not clamped.",
            f"Set freeze_until to the base tokenizer's size (at most {tok.size}).",
        )
    if until == tok.size:
        return CheckResult(
            "freeze.range", "warn",
            f"{source} {until} = tokenizer size: every text row is frozen, no text row will train.",
            "Set freeze_until to the base tokenizer's size so the new rows train, or use freeze mode `none`.",
        )
    return CheckResult(
        "freeze.range", "pass", f"rows 0..{until - 1} frozen, {tok.size - until} new row(s) train ({source})."
    )


@register_check("checkpoint.fingerprint", order=50)
def check_fingerprint(ctx: DoctorContext) -> CheckResult | None:
    """Return whether the tokenizer fingerprint recorded in the checkpoint matches the tokenizer."""
    checkpoint = ctx.checkpoint_or_none()
    tok = ctx.tokenizer_or_none()
    recorded = (checkpoint.meta or {}).get("tokenizer_fingerprint") if checkpoint is not None else None
    if tok is None or not recorded:
        return None
    if recorded == tok.fingerprint:
        return CheckResult("checkpoint.fingerprint", "pass", f"checkpoint was made for this tokenizer ({_short(recorded)}).")
    return CheckResult(
        "checkpoint.fingerprint", "fail",
        f"{ctx.checkpoint_path} was made for tokenizer {_short(recorded)}, but {tok.path} is {_short(tok.fingerprint)} "
        "(same size does not mean same pieces).",
        "Use the tokenizer the checkpoint records, or run `python -m core embeddings extend` from it to this tokenizer.",
    )


def find_random_tail(norms: torch.Tensor, boundary: int | None = None) -> tuple[int, float, float] | None:
    """Return (first row, tail median norm, base median norm) of a tail of rows whose norms differ from
    the rows before by more than RANDOM_NORM_RATIO, or None. Without `boundary`, the split that best
    separates mean log-norms (over the last three quarters of the rows) is tested."""
    n = int(norms.numel())
    if n < 4:
        return None
    logs = torch.log(norms.double().clamp_min(1e-12))
    if boundary is None:
        prefix = torch.cumsum(logs, 0)
        total = prefix[-1]
        splits = torch.arange(max(1, n // 4), n)
        head_mean = prefix[splits - 1] / splits
        tail_mean = (total - prefix[splits - 1]) / (n - splits)
        score = (head_mean - tail_mean).abs() * torch.sqrt(splits * (n - splits) / n)
        boundary = int(splits[int(torch.argmax(score))])
    if not 0 < boundary < n:
        return None
    base = float(norms[:boundary].median())
    tail = float(norms[boundary:].median())
    ratio = tail / base if base > 0 else math.inf
    if ratio > RANDOM_NORM_RATIO or ratio < 1 / RANDOM_NORM_RATIO:
        return boundary, tail, base
    return None


@register_check("embeddings.provenance", order=60)
def check_provenance(ctx: DoctorContext) -> CheckResult | None:
    """Return a warning when a foreign checkpoint's trailing rows look randomly initialised (norms far from base)."""
    checkpoint = ctx.checkpoint_or_none()
    family = _told_family(ctx, checkpoint)
    if family is None:
        return None
    meta = checkpoint.meta
    if meta is not None:
        made = "no rows added by extension"
        counts = meta.get("init_rows")
        if isinstance(counts, dict) and any(counts.values()):
            by_method = ", ".join(f"{n} by `{m}`" for m, n in counts.items() if n)
            made = f"rows from {meta.get('base_size')} on were made: {by_method}"
        elif meta.get("init"):
            made = f"rows from {meta.get('base_size')} on were made by `{meta['init']}`"
        return CheckResult("embeddings.provenance", "pass", f"written by LinguaForge: {made} (recorded in the metadata).")
    emb = checkpoint.state_dict.get(family.embedding_key)
    if emb is None or emb.dim() != 2:
        return None
    token_rows = int(emb.shape[0]) - family.row_offset
    norms = emb[:token_rows].float().norm(dim=1)
    found = find_random_tail(norms, ctx.freeze_until)
    if found is None:
        return CheckResult("embeddings.provenance", "pass", "row norms are consistent across the vocabulary.")
    start, tail, base = found
    return CheckResult(
        "embeddings.provenance", "warn",
        f"rows {start}..{token_rows - 1} ({token_rows - start} rows) have median norm {tail:.3g} vs {base:.3g} for "
        f"rows 0..{start - 1}: they look randomly initialised, and nothing records how they were made.",
        "Re-create the new rows from the base checkpoint: python -m core embeddings extend --init fvt "
        "(mean of the base rows of each new piece's sub-pieces).",
    )
