"""IndexTTS2 checks: its config.yaml read as a foreign trainer config, the tokenizer against the
published one, and the feature cache against IndexTTS2's limits (600 text tokens, 1815 codes,
codes below 8192). Each applies only to runs with `family: indextts` (or an explicit
`indextts_config` in the doctor's extras)."""

from __future__ import annotations

from pathlib import Path

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.errors import InputError
from core.families.indextts.gpt import BPE_NAME, CONFIG_NAME, SEMANTIC_CODES, read_indextts_config
from core.families.target_config import read_target_config, target_config_mismatch, write_indextts_config
from core.structured import read_json_file

LISTED = 5


def _model_dir(ctx: DoctorContext) -> Path | None:
    config = ctx.run_config
    if config is None or getattr(config, "family", None) != "indextts":
        return None
    value = config.model_dir or ctx.get_settings().get("families.indextts.model_dir")
    return ctx.get_settings().resolve(value) if value else None


def fixed_config_path(ctx: DoctorContext, tokenizer_size: int) -> Path:
    """Return where the doctor writes the corrected IndexTTS2 config.yaml for a tokenizer size."""
    return ctx.get_settings().resolve("families/indextts") / f"config.{tokenizer_size}.yaml"


def check_foreign_config(ctx: DoctorContext, path: Path, tokenizer) -> CheckResult:  # noqa: ANN001 (a Tokenizer)
    """Return pass when IndexTTS2's config.yaml at `path` sizes UnifiedVoice for `tokenizer`, else a failure
    whose fix names the corrected copy written into the workspace (reusable by `doctor --target-config`).

    The decision is the foreign-config gate's (`target_config_mismatch`), the same as `config.target`'s.
    """
    config = read_indextts_config(path)
    problem = target_config_mismatch(read_target_config(path), tokenizer.size)
    if problem is None:
        return CheckResult("indextts.config", "pass", f"{path}: gpt.number_text_tokens {tokenizer.size} = tokenizer size.")
    fixed = write_indextts_config(
        fixed_config_path(ctx, tokenizer.size), config, tokenizer.size, str(tokenizer.path), config.get("gpt_checkpoint", "gpt.pth")
    ).path
    return CheckResult(
        "indextts.config", "fail", problem + ".",
        f"Use the corrected copy LinguaForge wrote, {fixed} (gpt.number_text_tokens: {tokenizer.size}, "
        f"dataset.bpe_model: {tokenizer.path}); `export` writes the same beside the exported checkpoint.",
    )


@register_check("indextts.config", order=35)
def check_indextts_config(ctx: DoctorContext) -> CheckResult | None:
    """Return whether IndexTTS2's config.yaml fits its tokenizer.

    An explicit foreign config (`extras["indextts_config"]`) is checked against the run's
    tokenizer. A run's model folder is the published base: its config.yaml must fit the folder's
    own bpe.model; the run itself is sized from its tokenizer, never from the config's number.
    """
    from core.tokenizers.tokenizer import load_tokenizer

    tokenizer = ctx.tokenizer_or_none()
    if ctx.extras.get("indextts_config") and tokenizer is not None:
        return check_foreign_config(ctx, Path(ctx.extras["indextts_config"]), tokenizer)
    model_dir = _model_dir(ctx)
    if model_dir is None:
        return None
    path = model_dir / CONFIG_NAME
    config = read_indextts_config(path)
    bpe = model_dir / config.get("dataset", {}).get("bpe_model", BPE_NAME)
    if not bpe.is_file():
        raise InputError(f"{bpe}: missing; IndexTTS2 expects its tokenizer {bpe.name} in {model_dir}.")
    base = load_tokenizer(bpe)
    result = check_foreign_config(ctx, path, base)
    if result.status == "pass" and tokenizer is not None and tokenizer.size != base.size:
        result.message += (
            f" The run is sized from its tokenizer ({tokenizer.size} ids, {tokenizer.size + 1} rows); "
            "`export` writes config.yaml with that number."
        )
    return result


@register_check("indextts.tokenizer_prefix", order=36)
def check_tokenizer_prefix(ctx: DoctorContext) -> CheckResult | None:
    """Return whether the run's tokenizer keeps every id of the published IndexTTS2 tokenizer (a prefix extension)."""
    from core.tokenizers.tokenizer import load_tokenizer
    from core.tokenizers.vocab import first_difference

    model_dir = _model_dir(ctx)
    tokenizer = ctx.tokenizer_or_none()
    if model_dir is None or tokenizer is None:
        return None
    config = read_indextts_config(model_dir / CONFIG_NAME)
    base_path = model_dir / config.get("dataset", {}).get("bpe_model", BPE_NAME)
    if not base_path.is_file():
        raise InputError(f"{base_path}: missing; IndexTTS2 expects its tokenizer {base_path.name} in {model_dir}.")
    base = load_tokenizer(base_path)
    diff = first_difference(base, tokenizer)
    if diff is None:
        return CheckResult("indextts.tokenizer_prefix", "pass", f"{tokenizer.path.name} extends {base_path.name} ({base.size} → {tokenizer.size} ids).")
    detail = (
        f"it has only {tokenizer.size} ids" if diff >= tokenizer.size
        else f"id {diff} is {tokenizer.piece(diff)!r} here but {base.piece(diff)!r} in {base_path.name}"
    )
    return CheckResult(
        "indextts.tokenizer_prefix", "fail",
        f"{tokenizer.path} is not a prefix extension of IndexTTS2's {base_path}: {detail}; the base rows would mean other tokens.",
        f"Build the tokenizer with `tokenizer extend --base {base_path}` so ids 0..{base.size - 1} stay as they are.",
    )


@register_check("cache.indextts", order=63)
def check_indextts_cache(ctx: DoctorContext) -> CheckResult | None:
    """Return whether every cached clip fits IndexTTS2: text ≤ max_text_tokens, codes ≤ max_mel_tokens, codes < 8192."""
    import json

    from core.data.feature_cache import INDEX_NAME
    from core.families.indextts.features import CACHE_FORMAT

    path = Path(ctx.cache_dir) / INDEX_NAME if ctx.cache_dir is not None else None
    if path is None or not path.is_file():
        return None
    index = read_json_file(path)
    if not isinstance(index, dict) or index.get("format") != CACHE_FORMAT:
        return None
    limits = ctx.extras.get("model_config", {}).get("kwargs") or {}
    text_limit = int(limits.get("max_text_tokens", 600))
    code_limit = int(limits.get("max_mel_tokens", 1815))
    problems = []
    for label, bad in (
        (f"text longer than max_text_tokens {text_limit}", [e["id"] for e in index["items"] if e["n_text"] > text_limit]),
        (f"codes longer than max_mel_tokens {code_limit}", [e["id"] for e in index["items"] if e["n_codes"] > code_limit]),
        (f"a semantic code ≥ {SEMANTIC_CODES}", [e["id"] for e in index["items"] if e.get("max_code", -1) >= SEMANTIC_CODES]),
    ):
        if bad:
            problems.append(f"{len(bad)} clip(s) with {label} ({', '.join(bad[:LISTED])})")
    if problems:
        return CheckResult(
            "cache.indextts", "fail", f"cache {ctx.cache_dir}: " + "; ".join(problems) + ".",
            "Split or drop those clips in the manifest (UnifiedVoice's position tables end there; codes ≥ 8192 are "
            "start/stop ids, not speech) and rebuild the cache.",
        )
    return CheckResult("cache.indextts", "pass", f"{len(index['items'])} clips within {text_limit} text / {code_limit} codes, codes < {SEMANTIC_CODES}.")
