"""Preprocessing-cache checks: tokenizer fingerprint, max text id against the model's rows,
and clips longer than the model's position limits (training filters them; the doctor counts them)."""

from __future__ import annotations

import functools
from typing import Any, Callable

from core.data.cache import SHARED_INDEX_FORMATS
from core.data.feature_cache import CacheIndex, open_cache
from core.checks.doctor import CheckFunction, CheckResult, DoctorContext, register_check
from core.families import detect_family, get_family

LISTED_IDS = 10
REBUILD_FIX = "Run `python -m core preprocess --manifest M --tokenizer T --codec C` with the run's tokenizer and point the run at the new cache folder."


def _cache_check(check_id: str, order: int) -> Callable[[Callable[[DoctorContext, CacheIndex], CheckResult]], CheckFunction]:
    """Return a decorator registering a check of the run's preprocessing cache: the check gets the opened
    cache index, and is not applicable (None) when the run has no cache."""

    def decorate(check: Callable[[DoctorContext, CacheIndex], CheckResult]) -> CheckFunction:
        @functools.wraps(check)
        def run(ctx: DoctorContext) -> CheckResult | None:
            index = open_cache(ctx.cache_dir, SHARED_INDEX_FORMATS) if ctx.cache_dir is not None else None
            return None if index is None else check(ctx, index)

        return register_check(check_id, order)(run)

    return decorate


def model_rows(ctx: DoctorContext) -> tuple[int, str] | None:
    """Return (text rows of the model, where that number came from), or None when unknown.

    From the checkpoint's embedding when one is involved, else the tokenizer size (a model
    built from the tokenizer has exactly that many rows).
    """
    checkpoint = ctx.checkpoint_or_none()
    if checkpoint is not None:
        tokenizer = ctx.tokenizer_or_none()
        family = get_family(ctx.family) if ctx.family else detect_family(
            checkpoint.state_dict, checkpoint.meta, tokenizer.size if tokenizer is not None else None)
        return int(checkpoint.state_dict[family.embedding_key].shape[0]), f"checkpoint {checkpoint.path.name}"
    tokenizer = ctx.tokenizer_or_none()
    if tokenizer is not None:
        return tokenizer.size, f"tokenizer {tokenizer.path.name}"
    return None


def position_limits(ctx: DoctorContext) -> tuple[dict[str, int], str] | None:
    """Return ({max_text_tokens, max_speech_tokens}, source) from extras, run config or checkpoint."""
    sources: list[tuple[str, Any]] = [("doctor options", ctx.extras)]
    if ctx.run_config is not None:
        sources.append(("run config model", ctx.run_config.model))
    checkpoint = ctx.checkpoint_or_none()
    if checkpoint is not None and checkpoint.meta:
        sources.append(("checkpoint model_config", checkpoint.meta.get("model_config") or {}))
    for source, mapping in sources:
        limits = {k: mapping[k] for k in ("max_text_tokens", "max_speech_tokens") if isinstance(mapping.get(k), int)}
        if limits:
            return limits, source
    return None


@_cache_check("cache.tokenizer", order=60)
def check_cache_tokenizer(ctx: DoctorContext, index: CacheIndex) -> CheckResult:
    """Return whether the cache's text ids came from the run's tokenizer."""
    tokenizer = ctx.tokenizer_or_none()
    if tokenizer is None:
        return CheckResult("cache.tokenizer", "warn", f"{index.path.name[:16]}: no tokenizer to compare with.", "Pass --tokenizer.")
    if tokenizer.fingerprint != index.tokenizer_fingerprint:
        return CheckResult(
            "cache.tokenizer",
            "fail",
            f"cache {index.path} was built with tokenizer {index.tokenizer_fingerprint[:16]} "
            f"({index.data['tokenizer']['path']}), the run uses {tokenizer.fingerprint[:16]} ({tokenizer.path}).",
            REBUILD_FIX,
        )
    return CheckResult("cache.tokenizer", "pass", f"cache {index.path.name[:16]} matches tokenizer {tokenizer.fingerprint[:16]}.")


@_cache_check("cache.max_text_id", order=61)
def check_cache_max_id(ctx: DoctorContext, index: CacheIndex) -> CheckResult:
    """Return whether every cached text id indexes a model row."""
    rows = model_rows(ctx)
    if rows is None:
        return CheckResult("cache.max_text_id", "warn", f"max text id {index.max_text_id}; model rows unknown.", "Pass --tokenizer or --checkpoint.")
    count, source = rows
    if index.max_text_id >= count:
        return CheckResult(
            "cache.max_text_id",
            "fail",
            f"cache max text id {index.max_text_id} needs at least {index.max_text_id + 1} rows; {source} has {count}.",
            "Extend the checkpoint's rows to the tokenizer (`embeddings extend`) or rebuild the cache with the model's tokenizer.",
        )
    return CheckResult("cache.max_text_id", "pass", f"max text id {index.max_text_id} < {count} rows ({source}).")


@_cache_check("cache.lengths", order=62)
def check_cache_lengths(ctx: DoctorContext, index: CacheIndex) -> CheckResult:
    """Return how many cached clips exceed the model's position limits."""
    found = position_limits(ctx)
    if found is None:
        longest = f"longest text {index.data['histograms']['n_text']['max']}, codes {index.data['histograms']['n_codes']['max']}"
        return CheckResult("cache.lengths", "warn", f"position limits unknown; {longest}.", "Set model.max_text_tokens and model.max_speech_tokens.")
    limits, source = found
    text_limit = limits.get("max_text_tokens")
    speech_limit = limits.get("max_speech_tokens")
    too_long = [
        e["id"]
        for e in index.items
        if (text_limit is not None and e["n_text"] > text_limit) or (speech_limit is not None and e["n_codes"] > speech_limit)
    ]
    described = ", ".join(f"{k} {v}" for k, v in limits.items())
    if too_long:
        listed = ", ".join(too_long[:LISTED_IDS]) + (" …" if len(too_long) > LISTED_IDS else "")
        return CheckResult(
            "cache.lengths",
            "warn",
            f"{len(too_long)} of {len(index.items)} clips exceed {described} ({source}); training skips them: {listed}.",
            "Raise the model's position limits or split the long clips.",
        )
    return CheckResult("cache.lengths", "pass", f"all {len(index.items)} clips fit {described} ({source}).")
