"""Doctor check `adapter.targets`: does every LoRA target of an adapter run name a module of its model?

The base checkpoint's `.weight` keys are the model's module names (the model is built from it), so the
check reads them instead of building the model; a resumed adapter checkpoint must keep its targets.
"""

from __future__ import annotations

from core.checks.doctor import CheckResult, DoctorContext, register_check

CHECK_ID = "adapter.targets"


@register_check(CHECK_ID, order=40)
def check_adapter_targets(ctx: DoctorContext) -> CheckResult | None:
    """Return pass when the adapter's targets match modules of the base checkpoint (or the resumed
    adapter's own targets), fail naming the missing ones; None without an adapter or a checkpoint."""
    config = ctx.run_config
    if config is None or config.adapter.kind == "none":
        return None
    from core.families.registry import get_model_family
    from core.training.adapter import adapter_targets, missing_targets, target_modules_of_keys

    family = get_model_family(config.family)
    targets = adapter_targets(family, config.adapter)
    if ctx.resume_checkpoint is not None:
        record = (ctx.resume().meta or {}).get("adapter") or {}
        if sorted(record.get("targets") or []) != sorted(targets):
            return CheckResult(CHECK_ID, "fail", f"{ctx.resume_checkpoint.name} adapts {record.get('targets')}, this run {targets}.",
                               "Resume with the adapter settings the checkpoint was trained with, or start --fresh.")
        return CheckResult(CHECK_ID, "pass", f"resumed adapter targets {targets}.")
    checkpoint = ctx.checkpoint_or_none()
    if checkpoint is None:
        return None
    missing = missing_targets(target_modules_of_keys(list(checkpoint.state_dict)), targets)
    if missing:
        return CheckResult(CHECK_ID, "fail", f"adapter.targets {missing} match no module of {checkpoint.path.name}.",
                           f"Name modules of this {family.name} model (module names or suffixes); "
                           f"its defaults are {list(family.lora_targets)}.")
    return CheckResult(CHECK_ID, "pass", f"LoRA rank {config.adapter.rank} on {targets}.")
