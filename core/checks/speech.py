"""Speech files for periodic evaluation: a model-family run with `schedule.eval_every > 0` speaks its
checkpoints through the family's speech models (Chatterbox: S3Gen and the VoiceEncoder; IndexTTS2:
s2mel, CAMPPlus, BigVGAN, w2v-BERT, the semantic codec), so the doctor fails before training when
the model folder lacks one, instead of every evaluation failing after hours of training."""

from __future__ import annotations

from core.checks.doctor import CheckResult, DoctorContext, register_check
from core.errors import InputError

CHECK_ID = "eval.speech_files"


@register_check(CHECK_ID, order=16)
def check_speech_files(ctx: DoctorContext) -> CheckResult | None:
    """Return whether the family run's model folder holds every file synthesis reads (None when the run
    is not a family tts run with periodic evaluation)."""
    from core.families.registry import get_model_family
    from core.training.plan import resolve_model_dir

    config = ctx.run_config
    if config is None or config.family == "linguaforge" or config.task != "tts" or config.schedule.eval_every <= 0:
        return None
    family = get_model_family(config.family)
    every = f"schedule.eval_every {config.schedule.eval_every}"
    try:
        model_dir = resolve_model_dir(config, ctx.get_settings(), family.name)
        if model_dir is None:
            return CheckResult(
                CHECK_ID, "fail", f"{every}: periodic eval speaks through the {family.name} speech models of the model "
                f"folder, and the run names none (model_dir:, settings families.{family.name}.model_dir).",
                "Set model_dir: to the published folder, or set schedule.eval_every: 0 to train without periodic eval.",
            )
        files = family.speech_files(model_dir, ctx.get_settings())
    except InputError as exc:
        return CheckResult(
            CHECK_ID, "fail", f"{every}: periodic eval speaks through the {family.name} speech models, but {exc}",
            "Add that file to the model folder, or set schedule.eval_every: 0 to train without periodic eval.",
        )
    return CheckResult(CHECK_ID, "pass", f"{model_dir}: the {len(files)} files {family.name} synthesis reads for periodic eval.")
