"""Chatterbox doctor checks (the multilingual T3 and Chatterbox-Turbo/Nano): the published files of the model
folder, and a feature cache T3 can train on (speech tokens < 6561, text ≤ 2048 and speech ≤ 4096 tokens — or
the run model's limits)."""

from __future__ import annotations

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.data.feature_cache import open_cache
from core.errors import InputError

LISTED_IDS = 10


FAMILIES = ("chatterbox", "chatterbox-turbo")


def _family(ctx: DoctorContext) -> str | None:
    """Return the Chatterbox family the doctor checks (None for other families)."""
    for name in (ctx.family, ctx.run_config.family if ctx.run_config is not None else None):
        if name in FAMILIES:
            return name
    return None


@register_check("chatterbox.files", order=15)
def check_files(ctx: DoctorContext) -> CheckResult | None:
    """Return whether the run's Chatterbox model folder holds the published files (None for other families)."""
    if _family(ctx) is None or ctx.run_config is None:
        return None
    from core.families.registry import get_model_family
    from core.families.releases import RELEASES, family_release, pull_command
    from core.training.plan import resolve_model_dir

    family = get_model_family(_family(ctx))
    model_dir = None
    try:
        model_dir = resolve_model_dir(ctx.run_config, ctx.get_settings(), family.name)
        if model_dir is None:
            return CheckResult("chatterbox.files", "fail", f"no {family.name} model folder: the run names no model_dir and "
                               f"settings families.{family.name}.model_dir is unset.",
                               f"Set model_dir: to a folder with the published files ({', '.join(family.marker_names)}, "
                               "the voice encoder, S3Gen and the tokenizer): `python -m core models pull` fills one.")
        files = family.published_files(model_dir)
        content = family.check_release(files)
    except InputError as exc:
        release = family.release_of(model_dir) if model_dir is not None and model_dir.is_dir() else None
        pull = pull_command(release or family_release(family.name))
        return CheckResult("chatterbox.files", "fail", str(exc), f"`{pull}`, or copy the published {family.name} files into the folder.")
    release = family.release_of(model_dir)
    label = RELEASES[release].label if release else family.name
    return CheckResult("chatterbox.files", "pass",
                       f"{model_dir}: {label} ({', '.join(sorted(p.name for p in files.values()))}); {content}.")


@register_check("chatterbox.cache", order=63)
def check_cache(ctx: DoctorContext) -> CheckResult | None:
    """Return whether every cached clip fits T3: speech ids < 6561, text ≤ 2048, speech ≤ 4096 tokens."""
    from core.families.chatterbox.t3 import MAX_SPEECH_TOKENS, MAX_TEXT_TOKENS, SPEECH_CODES

    if ctx.cache_dir is None or _family(ctx) is None:
        return None
    index = open_cache(ctx.cache_dir)
    limits = ctx.extras.get("model_config") or {}
    max_text = int(limits.get("max_text_tokens", MAX_TEXT_TOKENS))
    max_speech = int(limits.get("max_speech_tokens", MAX_SPEECH_TOKENS))
    problems: list[str] = []
    bad_ids = [e["id"] for e in index.items if e.get("max_code", -1) >= SPEECH_CODES]
    if bad_ids:
        problems.append(f"{len(bad_ids)} clip(s) hold speech tokens ≥ {SPEECH_CODES} (not S3 codes): {', '.join(bad_ids[:LISTED_IDS])}")
    long_text = [e["id"] for e in index.items if e["n_text"] > max_text]
    if long_text:
        problems.append(f"{len(long_text)} clip(s) have more than {max_text} text tokens: {', '.join(long_text[:LISTED_IDS])}")
    long_speech = [e["id"] for e in index.items if e["n_codes"] > max_speech]
    if long_speech:
        problems.append(f"{len(long_speech)} clip(s) have more than {max_speech} speech tokens: {', '.join(long_speech[:LISTED_IDS])}")
    if problems:
        return CheckResult("chatterbox.cache", "fail", f"cache {index.path}: " + "; ".join(problems) + ".",
                           "Rebuild the cache with Chatterbox's own S3 tokenizer (model_dir's S3Gen file), and split clips "
                           "longer than 160 s or texts longer than 2048 tokens.")
    return CheckResult("chatterbox.cache", "pass", f"{len(index.items)} clips fit T3 (speech ids < {SPEECH_CODES}, "
                       f"text ≤ {max_text}, speech ≤ {max_speech}).")
