"""Doctor check `retention.base_data`: will a fine-tune train the shared weights on the new language alone?

A fine-tune that trains the backbone, the speech rows or the conditioning — everything but the new text
rows — with no base-language clips in its batches forgets the base language even though its base text rows
stay bit-identical (measured: docs/benchmarks.md, "Keeping English"). The check warns before any work, with
the cost and the fix (`data.replay`, the retention default); it passes when the run replays base-language
clips or trains only the new rows.
"""

from __future__ import annotations

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.training.retention import DEFAULT_RETENTION

CHECK_ID = "retention.base_data"
# What a fine-tune of the shared weights on the new language alone cost the base language, measured.
MEASURED_COST = ("in the quickstart's measurement the English validation loss rose +106 % over an Amharic "
                 "fine-tune with no English clips (docs/benchmarks.md, \"Keeping English\")")


@register_check(CHECK_ID, order=45)
def check_base_language_data(ctx: DoctorContext) -> CheckResult | None:
    """Return warn when a tts fine-tune (a base checkpoint, or a published family's) trains shared weights with no
    base-language replay, pass when it replays or trains the new rows alone; None for other runs."""
    config = ctx.run_config
    if config is None or config.task != "tts":
        return None
    if config.family == "linguaforge" and not config.base_checkpoint:
        return None  # trained from scratch: there is no base language to keep
    replay = config.data.replay
    if replay.manifest:
        return CheckResult(CHECK_ID, "pass", f"{replay.share:.0%} of each batch replays base-language clips "
                                             f"({replay.manifest}).")
    if config.freeze.mode == "all-but-new-rows":
        return CheckResult(CHECK_ID, "pass", "only the new text rows train; the base language's weights stay as they are.")
    trains = "LoRA adapters on the shared backbone" if config.adapter.kind != "none" else "the shared backbone"
    return CheckResult(
        CHECK_ID, "warn",
        f"this fine-tune trains {trains} on {config.data.manifest or 'the new language'} alone, with no base-language "
        f"clips: the base language will fade ({MEASURED_COST}).",
        f"mix base-language clips into every batch: set data.replay.manifest to the base language's manifest "
        f"(data.replay.share {DEFAULT_RETENTION['share']}, the share the retention benchmark chose), or train the new "
        "rows alone (freeze.mode all-but-new-rows).")
