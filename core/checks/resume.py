"""Doctor check `resume.tokenizer`: may this run resume from its checkpoint with its tokenizer?

A checkpoint of another family or task → fail; same tokenizer → pass; a prefix extension → pass, rows
will be extended and the Adam state remapped row by row; anything else → fail naming the first differing id.
"""

from __future__ import annotations

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.errors import InputError


@register_check("resume.tokenizer", order=70)
def check_resume(ctx: DoctorContext) -> CheckResult | None:
    """Return how the resume checkpoint relates to the run's tokenizer (None when not resuming)."""
    if ctx.resume_checkpoint is None:
        return None
    tokenizer = ctx.tokenizer_or_none()
    if tokenizer is None:
        return None
    from core.training.state import check_resume_source, resume_plan

    loaded = ctx.resume()
    if ctx.run_config is not None:
        try:
            check_resume_source(loaded, ctx.run_config.family, ctx.run_config.task)
        except InputError as exc:
            return CheckResult("resume.tokenizer", "fail", str(exc), "Resume from a checkpoint of this run's family and task.")
    try:
        plan = resume_plan(loaded, tokenizer, ctx.get_settings())
    except InputError as exc:
        return CheckResult("resume.tokenizer", "fail", str(exc), "Resume with the checkpoint's tokenizer or a `tokenizer extend` of it.")
    if plan.kind == "same":
        return CheckResult("resume.tokenizer", "pass", f"same tokenizer as {loaded.path.name} ({plan.new_size} ids).")
    return CheckResult(
        "resume.tokenizer", "pass",
        f"prefix extension {plan.old_size} → {plan.new_size} ids: rows extended, Adam state remapped row by row.",
    )
