"""Training tab: the run config form and YAML presets, a live Preflight (the doctor), the exact command
Start runs, Start / Stop / Resume, live progress and plots from the run's files, and the job log."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any, Callable

import gradio as gr
import yaml

from core.config import Settings, read_yaml
from core.checks.doctor import doctor_preflight
from core.confine import NAME_RULE, check_name, is_name
from core.errors import InputError
from core.families.registry import get_model_family, model_family_names
from core.training.run_config import (
    ADAPTER_KINDS, FREEZE_MODES, PRECISIONS, PRESETS_DIR, TASKS, check_config_paths, resolve_preset_chain, run_config_from_dict,
    save_run_config,
)
from core.training.plan import plan_run
from core.training.retention import DEFAULT_RETENTION
from core.training.run_form import OWN_FAMILY, FORM_KEYS, config_from_form, dict_to_form, for_family, run_config_path
from core.runs import RunFolder, progress_view, run_folder
from core.workspace_files import CHECKPOINTS, CODECS, PRESETS, RUN_CONFIGS, TOKENIZERS, TRAINING_MANIFESTS, find_files
from gradio_app.charts import LOSS_MEASURES, TOP1_MEASURES, metrics_figure, plot
from gradio_app.common import (LiveTimer, UIContext, escape_markdown, follow_request, form_message, plain_text,
                               relative, request_message, run_loss_weights, ui_action)
from gradio_app.runner import job_states
from gradio_app.style import PATH_FIELD

PREFLIGHT_HEADERS = ["check", "status", "message", "fix"]
LOSS_TITLE = "Loss"
TOP1_TITLE = "Speech codes predicted right"
LIVE_S = 2.0
BUILTIN = "preset:"
STATUS_LABELS = {"pass": "PASS", "warn": "WARN", "fail": "FAIL"}
FIELD_HELP = {  # run config key → (the form's label, what the field accepts)
    "name": ("Run name", NAME_RULE),
    "task": ("Task", "tts (speech), or lm (a text-only model) with the linguaforge family"),
    "tokenizer": ("Tokenizer", "a tokenizer file in the workspace"),
    "base_checkpoint": ("Base checkpoint", "a checkpoint in the workspace, or empty"),
    "codec": ("Codec", "a codec file in the workspace"),
    "data.manifest": ("Data manifest", "a manifest.jsonl in the workspace"),
    "data.corpus": ("Corpus files", "text files in the workspace, comma-separated"),
    "data.val_ratio": ("Validation share", "a number from 0 up to (not including) 1"),
    "model.preset": ("Model preset", "tiny or base"),
    "freeze.mode": ("Freeze", ", ".join(FREEZE_MODES)),
    "freeze.until": ("Freeze rows below", "auto or a row index from 0 up to the tokenizer's size"),
    "optim.lr": ("Learning rate", "a number above 0"),
    "batch.size": ("Batch size", "a whole number from 1 up"),
    "batch.accumulate": ("Accumulate", "a whole number from 1 up"),
    "schedule.max_steps": ("Max steps", "a whole number from 1 up"),
    "schedule.val_every": ("Validate every", "a whole number from 1 up"),
    "schedule.save_every": ("Save every", "a whole number from 1 up"),
    "precision": ("Precision", ", ".join(PRECISIONS)),
    "seed": ("Seed", "a whole number"),
    "adapter.kind": ("Adapter", ", ".join(ADAPTER_KINDS)),
    "adapter.rank": ("LoRA rank", "a whole number from 1 up (8–64 is usual)"),
    "adapter.alpha": ("LoRA alpha", "a number above 0 (often 2 × rank)"),
    "data.replay.manifest": ("Base-language clips to keep hearing", "a manifest.jsonl in the workspace, or empty"),
    "data.replay.share": ("Share of each batch from them", "a number above 0 and below 1"),
    "model_dir": ("Published model folder", "a folder in the workspace, a data root or a settings model folder, "
                                            "or empty"),
}
CONFIG_KEY = re.compile(r"^(?:form\.)?([a-z_.]+?)(?:\[\d+\])?(?:: | (?=['\"]))(.*)$", re.S)
FORM_FIELDS = {  # run config key → the form field (FORM_KEYS) an error about it is shown beside
    "name": "name", "task": "task", "tokenizer": "tokenizer", "base_checkpoint": "base_checkpoint", "codec": "codec",
    "data.manifest": "manifest", "data.corpus": "corpus", "data.val_ratio": "val_ratio", "freeze.until": "freeze_until",
    "optim.lr": "lr", "batch.size": "batch_size", "batch.accumulate": "accumulate", "schedule.max_steps": "max_steps",
    "schedule.val_every": "val_every", "schedule.save_every": "save_every", "seed": "seed", "model_dir": "model_dir",
    "adapter.kind": "adapter_kind", "adapter.rank": "adapter_rank", "adapter.alpha": "adapter_alpha",
    "data.replay.manifest": "replay_manifest", "data.replay.share": "replay_share",
}
CHECK_FIELDS = {"freeze.range": "freeze_until"}  # a doctor check → the form field its failure is about
TASK_WORDS = {"tts": "tts (speech)", "lm": "lm (a text-only model)"}  # what each task means, in plain words
INTERNAL_WORDS = {"freeze_until": "“Freeze rows below”", "freeze.until": "“Freeze rows below”",  # never on the page
                  "data.replay.manifest": "“Keep the base language”", "data.replay.share": "“Share of each batch”",
                  "freeze.mode": "“Freeze”"}
PATH_FIELDS = ("tokenizer", "base_checkpoint", "codec", "manifest", "model_dir", "replay_manifest")
CHECK_WORDS = {  # a doctor check's id → what the preflight table calls it (`python -m core doctor` shows the ids)
    "config": "run settings", "config.target": "run settings", "checkpoint.family": "model family of the checkpoint",
    "tokenizer.base": "base tokenizer", "checkpoint.rows": "embedding rows for the tokenizer",
    "config.declared_vocab": "vocabulary size the model expects", "freeze.range": "frozen rows",
    "checkpoint.fingerprint": "tokenizer the checkpoint was made with",
    "embeddings.provenance": "how the new rows were made", "memory.batch": "memory for one batch",
    "cache.tokenizer": "prepared features: tokenizer", "cache.max_text_id": "prepared features: text ids",
    "cache.lengths": "prepared features: lengths", "cache.indextts": "prepared features (IndexTTS2)",
    "resume.tokenizer": "tokenizer of the run to resume", "chatterbox.files": "published Chatterbox files",
    "chatterbox.cache": "prepared features (Chatterbox)", "indextts.config": "published IndexTTS2 settings",
    "indextts.tokenizer_prefix": "IndexTTS2 tokenizer keeps its pieces", "adapter.targets": "LoRA adapter layers",
    "disk.checkpoints": "disk space for checkpoints", "eval.speech_files": "files periodic evaluation needs",
    "retention.base_data": "keeping the base language",
}


def preview_command(ctx: UIContext, name: str, nproc: int = 1) -> str:
    """Return the exact command Start runs for run `name` on `nproc` GPUs: the train job's argv, planned as
    `submit` plans it (under torchrun with more than one).

    A bad run name gives its message as a `#` comment line instead.
    """
    try:
        return ctx.runner.preview("train", {"config": run_config_path(name)}, nproc)
    except InputError as exc:
        return f"# {exc}"


def preset_choices(ctx: UIContext) -> list[str]:
    """Return the loadable configs: built-in presets, workspace presets and existing run configs."""
    builtin = [f"{BUILTIN}{p.stem}" for p in sorted(PRESETS_DIR.glob("*.yaml"))]
    return builtin + find_files(ctx.settings, PRESETS, RUN_CONFIGS)


def load_config_source(ctx: UIContext, choice: str) -> dict[str, Any]:
    """Return the mapping stored in a preset choice (built-in name or workspace file), presets resolved.

    Raises InputError when `choice` is not one of `preset_choices` (a loader opens only what it lists),
    when the config is not valid, or when a path in it lies outside the allowed folders.
    """
    if not choice:
        raise InputError("choose a preset or a saved config to load.")
    if choice not in preset_choices(ctx):
        raise InputError(f"{choice!r} is not one of the listed presets and saved configs; pick one from the list "
                         "(configs live in the workspace's presets/ and runs/<run>/config.yaml).")
    if choice.startswith(BUILTIN):
        data = resolve_preset_chain({"preset": choice[len(BUILTIN):]})
    else:
        data = resolve_preset_chain(read_yaml(ctx.settings.resolve(choice)))
    check_config_paths(run_config_from_dict(data, choice), ctx.settings)
    return data


def task_choices(family: str) -> list[str]:
    """Return the tasks the Task field offers for model family `family` (its `tasks`).

    Raises InputError for an unknown family.
    """
    return list(get_model_family(family).tasks)


def field_error(message: str, family: str | None = None) -> tuple[str, str]:
    """Return (message, fix) for a run config error, naming the form field as labelled and what it accepts
    (for the Task, what the chosen model `family` trains). A `model:` setting the form does not show (one
    the loaded config brought) is named as a setting of the loaded config."""
    match = CONFIG_KEY.match(message)
    if match and match.group(1).startswith("model.") and match.group(1) not in FIELD_HELP:
        return (f"“{match.group(1)}” (a setting of the loaded config the form does not show): {match.group(2)}",
                "Remove it from the loaded config and Load it again, or pick another Model family and this one "
                "again, which drops it.")
    if not match or match.group(1) not in FIELD_HELP:
        return message, "Correct the field named in the message."
    label, accepts = FIELD_HELP[match.group(1)]
    if match.group(1) == "task" and family in model_family_names():
        accepts = " or ".join(TASK_WORDS[task] for task in task_choices(family))
    return f"“{label}”: {match.group(2)}", f"Set “{label}” to {accepts}."


def form_values(data: dict[str, Any], settings: Settings) -> list[Any]:
    """Return the form values (FORM_KEYS order) of a run config mapping, with paths inside the workspace
    shown relative to it (as the form's header says)."""
    values = dict(zip(FORM_KEYS, dict_to_form(data)))
    for key in PATH_FIELDS:
        values[key] = relative(settings, values[key]) if values[key] else ""
    values["corpus"] = ", ".join(relative(settings, c.strip()) for c in values["corpus"].split(",") if c.strip())
    return [values[key] for key in FORM_KEYS]


def plain_words(text: str, settings: Settings | None = None) -> str:
    """Return a check's message in the form's words: internal keys become the form's labels, command lines the tab
    that does the same (`form_message`), code spans quotes, other keys words and (with `settings`) workspace paths
    relative to it (`plain_text`)."""
    for word, label in INTERNAL_WORDS.items():
        text = text.replace(word, label)
    return plain_text(text, settings, {"family": "Model family"})


def error_field(message: str) -> str | None:
    """Return the form field (a FORM_KEYS name) a run config error is about, or None when it names none."""
    match = CONFIG_KEY.match(message)
    return FORM_FIELDS.get(match.group(1)) if match else None


def check_words(check_id: str) -> str:
    """Return what the preflight table calls the doctor check `check_id` (CHECK_WORDS, else its words)."""
    return CHECK_WORDS.get(check_id, check_id.replace(".", ": ").replace("_", " "))


def preflight(ctx: UIContext, base: dict[str, Any], values: list[Any]) -> tuple[list[list[str]], bool, str, dict[str, str]]:
    """Run the doctor on the plan of the form's config (`plan_run`, as `train` plans it); return (table rows, ok,
    summary, errors by form field).

    A config the validator refuses, a path outside the workspace or a config that cannot be planned
    (a model folder that is not a folder) is one failing `config` row, also shown beside its field;
    a failing doctor check about one field (CHECK_FIELDS) is shown beside it too.
    """
    try:
        config = config_from_form(base, values, ctx.settings)
        plan = plan_run(config, ctx.settings, ctx.settings.resolve(run_config_path(config.name)))
    except InputError as exc:
        message, fix = field_error(str(exc), dict(zip(FORM_KEYS, values)).get("family"))
        where = error_field(str(exc))
        fields = {where: f"{message} {fix}"} if where else {}
        return ([[check_words("config"), STATUS_LABELS["fail"], plain_words(message, ctx.settings),
                  plain_words(fix, ctx.settings)]], False,
                f"**FAIL** {escape_markdown(message)} Start is disabled.", fields)
    report = doctor_preflight(plan).to_dict()
    rows = [[check_words(c["id"]), STATUS_LABELS.get(c["status"], c["status"]), plain_words(c.get("message") or "", ctx.settings),
             plain_words(c.get("fix") or "", ctx.settings)] for c in report["checks"]]
    fields = {CHECK_FIELDS[c["id"]]: f"{row[2]} {row[3]}".strip() for c, row in zip(report["checks"], rows)
              if row[1] == STATUS_LABELS["fail"] and c["id"] in CHECK_FIELDS}
    failing = [check_words(c["id"]) for c in report["checks"] if c["status"] == "fail"]
    if failing:
        return (rows, False, f"**FAIL** Start is disabled: {', '.join(failing)} failed. Apply the fix shown, then Start.",
                fields)
    warns = sum(1 for c in report["checks"] if c["status"] == "warn")
    return rows, True, f"**PASS** Ready to start ({len(rows)} checks, {warns} warnings).", fields


def visible_gpus() -> int:
    """Return how many CUDA GPUs this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def settings_yaml(ctx: UIContext, base: dict[str, Any], values: list[Any]) -> str:
    """Return every setting the run would start with (the loaded config under the form) as YAML, or
    a comment naming what is wrong while the form does not make a valid config."""
    try:
        data = config_from_form(base, values, ctx.settings).to_dict()
    except InputError as exc:
        return f"# {field_error(str(exc))[0]}\n"
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def failure_line(job: dict[str, Any] | None) -> str:
    """Return the reason a watched job failed, in the dashboard's words (empty unless it failed)."""
    if not job or job.get("status") != job_states.FAILED:
        return ""
    return f"**Job {job['id']} failed:** {form_message(job.get('error') or 'no reason recorded; see the log below.')}"


def family_notice(dropped: list[str], family: str) -> str:
    """Return the note shown when switching to `family` dropped inherited `model:` settings."""
    if not dropped:
        return ""
    return (f"Not used by {family} (its shape comes from its own model files), so dropped from the loaded "
            f"config: {', '.join(dropped)}.")


def progress_html(status: dict[str, Any] | None, job: dict[str, Any] | None, last: dict[str, Any] | None) -> str:
    """Return the progress bar with step, ETA and tokens/s for the watched run: a bar filled to its share of
    the steps (an empty frame before the run reports), or the words "no training run watched yet"."""
    view = progress_view((job or {}).get("progress"), status, (job or {}).get("status"))
    step, total = view.done or 0, view.total or 0
    if not view.state:
        return ('<div class="lf-progress"><div id="train-progress-text">No training run watched yet: Start one, or '
                'type the name of a run that has trained.</div></div>')
    parts = [view.text(show_state=True), *([job["waits_for"]] if (job or {}).get("waits_for") else [])]
    tokens = (last or {}).get("tokens_per_s") or view.metrics.get("tokens_per_s")
    if tokens:
        parts.append(f"{float(tokens):,.0f} tokens/s")
    share = min(step / total, 1.0) if total else 0.0
    return (
        f'<div class="lf-progress"><div id="train-progress" role="progressbar" aria-valuenow="{int(step)}" '
        f'aria-valuemax="{int(total)}" style="width:100%;height:18px;border:1px solid var(--border-color-primary);'
        f'border-radius:4px;overflow:hidden"><div style="width:{share * 100:.2f}%;height:100%;'
        f'background:var(--color-accent)"></div></div>'
        f'<div id="train-progress-text">{html.escape(" · ".join(parts))}</div></div>'
    )


def build(ctx: UIContext, demo: gr.Blocks) -> LiveTimer:
    """Lay out the Training tab; return its live timer."""
    settings, runner = ctx.settings, ctx.runner
    tokenizers = find_files(settings, TOKENIZERS)

    with gr.Tab("Training", id="training") as tab:
        base = gr.State({})
        with gr.Row():
            choices = preset_choices(ctx)
            preset = gr.Dropdown(label="Load preset or saved config", choices=choices, allow_custom_value=True,
                                 value=f"{BUILTIN}tiny" if f"{BUILTIN}tiny" in choices else None,
                                 scale=3, elem_id="train-preset")
            load_btn = gr.Button("Load", size="sm", scale=1, elem_id="train-load")
            save_name = gr.Textbox(label="Save form as workspace preset", placeholder="presets/NAME.yaml name", scale=2)
            save_btn = gr.Button("Save preset", size="sm", scale=1)
        preset_status = gr.Markdown(elem_id="train-preset-status")
        gr.Markdown("Paths are relative to the workspace.")
        errors: dict[str, Any] = {}

        def beside(key: str, make: Callable[[], Any]) -> Any:
            """Lay out form field `key` (made by `make`) with its error line right under it."""
            with gr.Column(min_width=160):
                component = make()
                errors[key] = gr.Markdown(elem_id=f"train-error-{key.replace('_', '-')}", elem_classes=["lf-field-error"])
            return component

        with gr.Column():
            with gr.Row():
                name = beside("name", lambda: gr.Textbox(label="Run name", value="run", elem_id="train-name"))
                task = beside("task", lambda: gr.Radio(
                    list(TASKS), value="tts", label="Task (lm: a text-only model, linguaforge family only)",
                    elem_id="train-task"))
                model_preset = gr.Dropdown(["tiny", "base"], value="tiny", label="Model preset", allow_custom_value=True)
                family = gr.Dropdown(list(model_family_names()), value="linguaforge", label="Model family",
                                     elem_id="train-family")
                model_dir = beside("model_dir", lambda: gr.Textbox(
                    label="Published model folder (chatterbox, chatterbox-turbo, indextts)", elem_id="train-model-dir",
                    placeholder="the settings' model folder of the family when empty"))
            with gr.Row():
                tokenizer = beside("tokenizer", lambda: gr.Dropdown(
                    tokenizers, label="Tokenizer", allow_custom_value=True, elem_id="train-tokenizer", elem_classes=[PATH_FIELD]))
                base_checkpoint = beside("base_checkpoint", lambda: gr.Dropdown(
                    find_files(settings, CHECKPOINTS), label="Base checkpoint (optional)", allow_custom_value=True,
                    elem_id="train-checkpoint", elem_classes=[PATH_FIELD]))
                codec = beside("codec", lambda: gr.Dropdown(
                    find_files(settings, CODECS), label="Codec (tts)", allow_custom_value=True, elem_id="train-codec"))
            with gr.Row():
                manifest = beside("manifest", lambda: gr.Dropdown(
                    find_files(settings, TRAINING_MANIFESTS), label="Data manifest (tts)", allow_custom_value=True,
                    elem_id="train-manifest"))
                corpus = beside("corpus", lambda: gr.Textbox(label="Corpus files (lm, comma-separated)",
                                                             elem_id="train-corpus"))
                val_ratio = beside("val_ratio", lambda: gr.Number(0.05, label="Validation share", minimum=0, maximum=0.99))
            family_note = gr.Markdown(elem_id="train-family-note")
            with gr.Row():
                freeze_mode = gr.Dropdown(list(FREEZE_MODES), value="base-rows", label="Freeze")
                freeze_until = beside("freeze_until", lambda: gr.Textbox(
                    "auto", label="Freeze rows below (auto: the base tokenizer's size)", elem_id="train-freeze-until"))
                lr = beside("lr", lambda: gr.Number(5.0e-4, label="Learning rate", step=1e-4,
                                                    elem_id="train-lr"))
                batch_size = beside("batch_size", lambda: gr.Number(16, label="Batch size", precision=0,
                                                                    elem_id="train-batch"))
                accumulate = beside("accumulate", lambda: gr.Number(1, label="Accumulate", precision=0))
                batch_auto = gr.Checkbox(False, label="Batch as large as fits (batch size × accumulate per step)",
                                         elem_id="train-batch-auto")
            with gr.Row():
                max_steps = beside("max_steps", lambda: gr.Number(2000, label="Max steps", precision=0,
                                                                  elem_id="train-max-steps"))
                val_every = beside("val_every", lambda: gr.Number(200, label="Validate every", precision=0,
                                                                  elem_id="train-val-every"))
                save_every = beside("save_every", lambda: gr.Number(200, label="Save every", precision=0,
                                                                    elem_id="train-save-every"))
                precision = gr.Dropdown(list(PRECISIONS), value="auto", label="Precision")
                seed = beside("seed", lambda: gr.Number(0, label="Seed", precision=0))
            with gr.Row():
                adapter_kind = beside("adapter_kind", lambda: gr.Dropdown(
                    list(ADAPTER_KINDS), value="none", label="Adapter (lora: train LoRA matrices and the text rows only)",
                    elem_id="train-adapter"))
                adapter_rank = beside("adapter_rank", lambda: gr.Number(16, label="LoRA rank", precision=0,
                                                                        elem_id="train-adapter-rank"))
                adapter_alpha = beside("adapter_alpha", lambda: gr.Number(32, label="LoRA alpha",
                                                                          elem_id="train-adapter-alpha"))
            with gr.Row():
                replay_manifest = beside("replay_manifest", lambda: gr.Dropdown(
                    [""] + find_files(settings, TRAINING_MANIFESTS), value="", allow_custom_value=True,
                    label="Keep the base language: its clips mixed into every batch (a fine-tune; empty = none)",
                    elem_id="train-replay"))
                replay_share = beside("replay_share", lambda: gr.Number(
                    DEFAULT_RETENTION["share"], label="Share of each batch from those clips", minimum=0.01, maximum=0.99,
                    elem_id="train-replay-share"))
        with gr.Accordion("Every setting this run starts with (the loaded config with the form on top)", open=False):
            all_settings = gr.Code(language="yaml", interactive=False, elem_id="train-settings")
        with gr.Accordion("Details: the command Start runs (for the command line)", open=False):
            command = gr.Textbox(label="Command", value=preview_command(ctx, "run"), interactive=False,
                                 elem_id="train-command", buttons=["copy"])
        with gr.Group():
            gr.Markdown("### Preflight (the doctor, run live as the form changes)")
            summary = gr.Markdown(elem_id="preflight-summary")
            table = gr.Dataframe(headers=PREFLIGHT_HEADERS, value=[], interactive=False, wrap=True,
                                 column_widths=["14%", "6%", "50%", "30%"], elem_id="preflight-table")
        with gr.Row():
            start_btn = gr.Button("Start", variant="primary", interactive=False, elem_id="train-start")
            stop_btn = gr.Button("Stop", variant="stop", interactive=False, elem_id="train-stop")
            resume_btn = gr.Button("Resume", elem_id="train-resume")
            gpus = visible_gpus()
            nproc = gr.Number(1, label=f"GPUs for this run (of {gpus})", precision=0, minimum=1, maximum=max(gpus, 1),
                              visible=gpus > 1, elem_id="train-nproc")
            job_id = gr.Textbox(label="Watching job", interactive=False, elem_id="train-job")
        job_error = gr.Markdown(elem_id="train-job-error")
        message = gr.Markdown(elem_id="train-message")
        followed = gr.State(None)  # the Stop or Resume request the message shows, kept current by the timer
        bar = gr.HTML(progress_html(None, None, None), elem_id="train-progress-box")
        with gr.Row():
            loss_plot = plot("train-loss-plot", metrics_figure([], LOSS_MEASURES, LOSS_TITLE))
            top1_plot = plot("train-top1-plot", metrics_figure([], TOP1_MEASURES, TOP1_TITLE))
        drawn = gr.State("")
        with gr.Accordion("Details: the job's log", open=False):
            log = gr.Textbox(label="Job log (tail)", lines=10, max_lines=20, interactive=False, elem_id="train-log")
        gr.HTML(f'<a href="{ctx.tensorboard_path}" target="_blank">Open TensorBoard in a new tab</a>')
        timer = gr.Timer(LIVE_S, active=False)  # ticking while the tab is in view

    fields = [name, task, tokenizer, base_checkpoint, codec, manifest, corpus, val_ratio, model_preset, freeze_mode,
              lr, batch_size, accumulate, max_steps, val_every, save_every, precision, seed, family, model_dir, freeze_until,
              adapter_kind, adapter_rank, adapter_alpha, replay_manifest, replay_share, batch_auto]
    error_boxes = list(errors.values())

    def on_change(gpu_count: float | None, base_value: dict[str, Any], *values: Any) -> tuple[Any, ...]:
        rows, ok, text, by_field = preflight(ctx, base_value, list(values))
        shown = [f"**{by_field[key]}**" if key in by_field else "" for key in errors]
        return (rows, text, gr.update(interactive=ok), preview_command(ctx, values[0], int(gpu_count or 1)),
                settings_yaml(ctx, base_value, list(values)), *shown)

    @ui_action(outputs=2 + len(FORM_KEYS))
    def load(choice: str, current_name: str) -> list[Any]:
        data = load_config_source(ctx, choice)
        data.setdefault("name", current_name)
        return ["", data, *form_values(data, settings)]

    @ui_action(outputs=2)
    def save(preset_name: str, base_value: dict[str, Any], *values: Any) -> tuple[str, Any]:
        check_name(preset_name, "preset name")
        config = config_from_form(base_value, list(values), settings)
        path = save_run_config(config, settings.workspace / "presets" / f"{preset_name}.yaml")
        return f"Saved {relative(settings, path)}.", gr.update(choices=preset_choices(ctx))

    @ui_action(outputs=2, message=1)
    def start(gpu_count: float | None, base_value: dict[str, Any], *values: Any) -> tuple[str, str]:
        # Validated and planned once here (what preflight checked); the worker's doctor checks the written config
        # before the trainer starts.
        config = config_from_form(base_value, list(values), settings)
        plan_run(config, settings)
        rel = run_config_path(config.name)
        folder = run_folder(settings, config.name)
        if folder.is_running():
            raise InputError(f"run {config.name} is already running; Stop it or pick another run name.")
        done = folder.status()
        if done.get("state") == "finished" and int(done.get("step") or 0) >= config.schedule.max_steps:
            raise InputError(f"run {config.name} has trained all its {config.schedule.max_steps} steps already, so "
                             "Start would do nothing. Give a new Run name, or raise Max steps to train it further.")
        save_run_config(config, settings.resolve(rel))
        new_id = runner.submit("train", {"config": rel}, nproc=int(gpu_count or 1))
        gpus = f" on {int(gpu_count)} GPUs" if int(gpu_count or 1) > 1 else ""
        return new_id, f"Started training job `{new_id}` for run {escape_markdown(config.name)}{gpus}."

    @ui_action(outputs=2)
    def stop(current: str) -> tuple[str, Any]:
        if not current:
            raise InputError("no training job to stop; Start one first.")
        return request_message("Stop", runner.cancel(current))

    @ui_action(outputs=3, message=1)
    def resume(current: str) -> tuple[str, str, Any]:
        if not current:
            raise InputError("no training job to resume; Start one first.")
        job = runner.resume(current)  # it continues from its last checkpoint
        return (str(job["id"]), *request_message("Resume", job))

    def live(current: str, run_name: str, shown: str, asked: dict[str, Any] | None,
             said: str | None) -> tuple[Any, ...]:
        job = None
        if current:
            try:
                job = runner.get(current)
            except InputError:
                job = None
        folder = _run_folder(ctx, job, run_name)
        rows = folder.metrics() if folder else []
        last = next((r for r in reversed(rows) if r.get("split") == "train"), None)
        status = folder.status() if folder else None
        tail = runner.log_tail(current, 40) if job else ""
        active = bool(job) and job["status"] in job_states.IN_PROGRESS
        key = f"{folder.path if folder else ''}:{len(rows)}"
        if key == shown:  # nothing new: the charts keep what they show (and the reader's zoom)
            charts: tuple[Any, Any] = (gr.update(), gr.update())
        else:
            weights = run_loss_weights(folder.path) if folder else {}
            charts = (metrics_figure(rows, LOSS_MEASURES, LOSS_TITLE, weights),
                      metrics_figure(rows, TOP1_MEASURES, TOP1_TITLE))
        return (progress_html(status, job, last), *charts, tail, gr.update(interactive=active), failure_line(job), key,
                *follow_request(runner, asked, said))

    def adapt_to_family(base_value: dict[str, Any], chosen: str) -> tuple[Any, ...]:
        data, dropped = for_family(base_value or {}, chosen)
        own = chosen == OWN_FAMILY
        return data, family_notice(dropped, chosen), gr.update(visible=own), gr.update(visible=own)

    def choices() -> tuple[Any, ...]:
        return (gr.update(choices=preset_choices(ctx)),
                gr.update(choices=find_files(settings, TOKENIZERS)),
                gr.update(choices=find_files(settings, CHECKPOINTS)),
                gr.update(choices=find_files(settings, CODECS)),
                gr.update(choices=find_files(settings, TRAINING_MANIFESTS)))

    def on_load() -> tuple[Any, ...]:
        job = runner.latest("train")
        folder = _run_folder(ctx, job, "") if job else None
        if folder is None or not folder.config.is_file():
            return ("", gr.update(), *[gr.update()] * len(fields), *choices())
        loaded = relative(settings, folder.config)  # the loader names what the fields now hold
        try:
            data = load_config_source(ctx, loaded)
            values = form_values(data, settings)
        except InputError:
            return (str(job["id"]), gr.update(), *[gr.update()] * len(fields), *choices())
        return (str(job["id"]), data, *values, gr.update(choices=preset_choices(ctx), value=loaded), *choices()[1:])

    # One queue for every preflight of the tab, run in the order triggered: a slow check of older values (a
    # family switch) can never land after, and overwrite, the check of what Load filled in since.
    check = {"fn": on_change, "inputs": [nproc, base, *fields], "show_progress": "hidden", "concurrency_limit": 1,
             "concurrency_id": "train-preflight",
             "outputs": [table, summary, start_btn, command, all_settings, *error_boxes]}
    gr.on([field.change for field in (nproc, *fields)], trigger_mode="always_last", **check)
    load_btn.click(load, inputs=[preset, name], outputs=[preset_status, base, *fields])
    save_btn.click(save, inputs=[save_name, base, *fields], outputs=[preset_status, preset])
    start_btn.click(start, inputs=[nproc, base, *fields], outputs=[job_id, message])
    stop_btn.click(stop, inputs=job_id, outputs=[message, followed])
    resume_btn.click(resume, inputs=job_id, outputs=[job_id, message, followed])
    watched = {"fn": live, "inputs": [job_id, name, drawn, followed, message], "show_progress": "hidden",
               "outputs": [bar, loss_plot, top1_plot, log, stop_btn, job_error, drawn, message, followed]}
    timer.tick(**watched, queue=False)  # off the queue: about half the page's work of a queued tick (LiveTimer)
    tab.select(**watched)  # current the moment the tab opens, not a tick later
    family.change(adapt_to_family, inputs=[base, family], outputs=[base, family_note, model_preset, codec]).then(**check)
    choice_fields = [preset, tokenizer, base_checkpoint, codec, manifest]
    tab.select(choices, outputs=choice_fields, show_progress="hidden")
    demo.load(on_load, outputs=[job_id, base, *fields, *choice_fields]).then(**check)
    return LiveTimer(tab, timer)


def _run_folder(ctx: UIContext, job: dict[str, Any] | None, run_name: str) -> RunFolder | None:
    """Return the run folder of a train job (from its record or config), else of the form's run name."""
    if job:
        if job.get("run_dir"):
            return RunFolder(Path(job["run_dir"]))
        config = (job.get("params") or {}).get("config")
        if config:
            return RunFolder(ctx.settings.resolve(config).parent)
    if is_name(run_name):
        return run_folder(ctx.settings, run_name)
    return None
