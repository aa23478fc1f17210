"""The foreign-config gate: a trainer config (IndexTTS2 config.yaml, Chatterbox T3 config) must declare the tokenizer's size."""

from __future__ import annotations

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.families.target_config import read_target_config, target_config_mismatch


@register_check("config.target", order=31)
def check_target_config(ctx: DoctorContext) -> CheckResult | None:
    """Return pass when --target-config declares the tokenizer's size, fail with the corrected value otherwise.

    Raises InputError (reported as a failure) when the config does not parse or declares no vocab size.
    """
    tok = ctx.tokenizer_or_none()
    if ctx.target_config_path is None or tok is None:
        return None
    config = read_target_config(ctx.target_config_path)
    problem = target_config_mismatch(config, tok.size)
    if problem is None:
        return CheckResult(
            "config.target", "pass",
            f"{config.path.name}: `{config.key}` = {config.vocab} = tokenizer size ({config.family} trainer).",
        )
    return CheckResult(
        "config.target", "fail", problem + ".",
        f"Set `{config.key}: {tok.size}` in {config.path}, or write a corrected copy with python -m core embeddings "
        f"extend … --write-config {config.path.with_name(config.path.stem + '_' + str(tok.size) + config.path.suffix)}.",
    )
