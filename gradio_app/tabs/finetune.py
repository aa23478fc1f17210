"""Fine-tune a published model tab: a guided path from a Chatterbox, Chatterbox-Turbo/Nano, IndexTTS2 or Sesame CSM
model folder to a first spoken sample in a new language, one click a step, each result chosen for the next step.

1. the model folder (listed from the configured roots, checked for the family's published files); before any click
   the step names the family's published release, the files it needs, where they go and the command that fetches
   them (`core.families.releases`, `release_guide`); its Pull button runs that command (`models pull`, a job:
   `core.hub.pull_release`, from the user's Hub cache) and chooses the folder it fills;
2. the new-language tokenizer: the folder's tokenizer merged (Chatterbox's JSON, Turbo's GPT-2 and CSM's Llama-3
   tokenizer folders: `tokenizer.merge`; no language tag for CSM, whose text carries none) or extended (IndexTTS2's
   SentencePiece model, `tokenizer.extend`) with the user's text,
   English (and Turbo's tags) protected;
3. the grown embeddings (`embeddings.extend`); 4. a training run (its config written, a `train` job) that keeps
   the base language by default (`core.training.retention`: the retention default's share of each batch from
   the base language's clips, the workspace's English manifest preselected when it holds one);
5. a sample spoken by the trained checkpoint (`synthesize`), played in the page.
Every step is a job of the runner, the same kinds the Tokenizer, Embeddings, Training and Inference tabs submit.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterator

import gradio as gr

from core.confine import check_name
from core.errors import InputError
from core.families.folders import check_model_folder, find_model_folders
from core.families.registry import get_model_family
from core.families.releases import family_release, folder_of, pull_command, release_text
from core.numbers import MAX_NEW_TOKENS, MAX_STEPS, MAX_VOCAB, NumberRange
from core.runs import run_folder
from core.training.retention import DEFAULT_RETENTION, retention_overlay
from core.training.run_config import EvalConfig, check_config_paths, run_config_from_dict, save_run_config
from core.training.run_form import run_config_path
from core.uploads import CORPUS, MODEL, VOICE
from core.workspace_files import CHECKPOINTS, CORPORA, TOKENIZERS, TRAINING_MANIFESTS, VOICES, FileKind, find_files
from gradio_app.common import (
    init_choices,
    UIContext,
    long_action,
    corpus_field,
    upload_into,
    follow_job,
    inside_workspace,
    job_line,
    paths_param,
    relative,
    require_success,
    require_text,
    ui_action,
)
from gradio_app.runner import JobRunner
from gradio_app.style import PATH_FIELD

FAMILIES = {"Chatterbox": "chatterbox", "Chatterbox-Turbo / Nano": "chatterbox-turbo", "IndexTTS2": "indextts",
            "Sesame CSM": "csm"}
UNTAGGED = ("csm",)  # families whose text starts with no language tag (CSM's is `[speaker]text`)
LABELS = {"corpus": "Text of the new language", "vocab_size": "New pieces", "target_size": "New pieces",
          "language_tag": "Language tag", "base": "Base tokenizer", "tokenizer": "New tokenizer",
          "checkpoint": "Checkpoint", "text": "Text to speak", "language": "Language tag", "reference": "Voice",
          "max_new_tokens": "Longest sample", "init": "Start of the new rows", "model_dir": "Model folder",
          "data.replay.manifest": "Keep the base language", "data.replay.share": "Share of each batch"}
NO_FOLDER = "Choose a model folder first: step 1 says which files it needs and where to get them."
VOICES_SHOWN = 20  # clips of the training manifest offered as the sample's voice
TRAIN_BATCH = 4
BASE_LANGUAGE = EvalConfig.base_language  # the published releases' base language, whose clips a fine-tune replays
SHARE = NumberRange(0.0, 1.0, low_open=True, high_open=True)  # of each batch, from the base language's clips


def voice_clips(ctx: UIContext, manifest: str | None) -> list[str]:
    """Return up to VOICES_SHOWN audio files of the manifest's clips (workspace-relative where inside it),
    in manifest order; [] without a manifest. Raises InputError for a manifest outside the roots or unusable."""
    from core.data.manifest import load_manifest_rows

    if not manifest:
        return []
    rows = load_manifest_rows(inside_workspace(ctx.settings, manifest, "Training data"))
    return [relative(ctx.settings, row.path) for row in rows[:VOICES_SHOWN]]


def run_config_data(name: str, family: str, folder: str, tokenizer: str, checkpoint: str, manifest: str,
                    steps: int, keep: str | None = None, share: float | None = None) -> dict[str, Any]:
    """Return the run config mapping of the guided run `name`: the family's model folder, the new tokenizer,
    the grown checkpoint as its base, the manifest, `steps` steps with one validation and checkpoint at the end;
    with `keep` (a base-language manifest) the retention default (`DEFAULT_RETENTION`: `share` of each batch, its
    share when None, from `keep`'s clips); without it the new language alone."""
    overlay = retention_overlay(DEFAULT_RETENTION["strategy"], keep, share) if keep else {}
    return {
        "name": name, "task": "tts", "family": family, "model_dir": folder, "tokenizer": tokenizer,
        "base_checkpoint": checkpoint, **{key: value for key, value in overlay.items() if key != "data"},
        "data": {"manifest": manifest, **overlay.get("data", {})},
        "batch": {"size": TRAIN_BATCH},
        "schedule": {"max_steps": steps, "val_every": steps, "save_every": steps, "keep_last": 1},
    }


def keep_words(keep: str | None, share: float | None) -> str:
    """Return what step 4 says of keeping the base language: the share of each batch from `keep`'s clips, or,
    with no `keep`, that the model will forget it and how to keep it."""
    if not keep:
        return (f"**No clips of the base language ({BASE_LANGUAGE}) chosen:** this run learns the new language alone "
                "and the model forgets the old one (in the quickstart's measurement the English loss doubled). "
                "Import clips of it in the Dataset tab and choose them here to keep it.")
    shown = f"{share:.0%}" if isinstance(share, (int, float)) and 0 < share < 1 else "a share"
    return (f"{shown} of each training batch comes from the clips of `{keep}`, so the model keeps the base language "
            f"while it learns the new one ({DEFAULT_RETENTION['share']:.0%} kept it best in the retention benchmark).")


def sizes_said(report: dict[str, Any], asked: int) -> str:
    """Return what a tokenizer merge or extend report says of its size against the `asked` new pieces, as a
    sentence: the base size, the pieces added (the text's pieces the model lacked, of those asked), the
    language tag's id — why the grown model gets the rows it gets; "" when the report has no sizes."""
    if not isinstance(report.get("new_size"), int) or not isinstance(report.get("base_size"), int):
        return ""
    added = report.get("pieces_added")
    tag = f", plus the language tag {report['language_tag']}" if report.get("language_tag") else ""
    return (f" The new tokenizer has {report['new_size']:,} pieces: the model's {report['base_size']:,} and "
            f"{added if added is not None else report['new_size'] - report['base_size']:,} new ones of the {asked:,} "
            f"asked (pieces the model already had are not added twice{tag}); step 3 grows the model's text rows to match.")


def english_kept(report: dict[str, Any]) -> str:
    """Return what a tokenizer merge or extend report says of the protected English lines, as a sentence
    (" English: 0 of 49,887 protected lines encode differently."); "" when nothing was protected."""
    drift = report.get("base_drift")
    if not drift:
        return ""
    return f" English: {drift['lines_changed']:,} of {drift['lines_checked']:,} protected lines encode differently."


def file_of_language(settings: Any, kind: FileKind, tag: str, suffix: str) -> list[str]:
    """Return the workspace's file of `kind` in language `tag` to preselect (a quickstart's `text/am.txt` or
    `sample/en.jsonl`): the newest named `<tag><suffix>` or lying in a folder named `<tag>`, as a one-item list
    ([] when there is none)."""
    named = [path for path in find_files(settings, kind)
             if Path(path).suffix == suffix and tag in (Path(path).stem, Path(path).parent.name)]
    return [max(named, key=lambda path: settings.resolve(path).stat().st_mtime)] if named else []


def text_of_language(settings: Any, tag: str) -> list[str]:
    """Return the workspace's text of language `tag` to preselect (`file_of_language`)."""
    return file_of_language(settings, CORPORA, tag, ".txt")


def base_language_manifest(settings: Any) -> str:
    """Return the workspace's manifest of the base language's clips to keep it by (`file_of_language`), "" without one."""
    return next(iter(file_of_language(settings, TRAINING_MANIFESTS, BASE_LANGUAGE, ".jsonl")), "")


def new_language_manifest(manifests: list[str], base: str) -> str | None:
    """Return the training data to preselect: the first of `manifests` that is not the base language's `base`
    (that one is kept by replay), else the first; None when there is none."""
    return next((path for path in manifests if path != base), manifests[0] if manifests else None)


def release_guide(family_label: str, found: list[str]) -> str:
    """Return step 1's guide for `family_label`: that no folder of it was found (when `found` is empty), its
    published release and the files the folder needs, where to put them, and the command that fetches them
    (in a fold: a command line is for those who look for it)."""
    family = FAMILIES[family_label]
    release = family_release(family)
    lead = "" if found else f"**No {family_label} model folder in the workspace yet.** "
    return (f"{lead}{release_text(family)} Pull fetches them from the Hub into {folder_of(release)}; or put the files "
            "in one folder inside the workspace yourself, or upload them with the button above: the list finds the "
            "folder.\n\n"
            f"<details><summary>Fetch the release from the command line</summary>\n\n`{pull_command(release)}`\n\n</details>")


def pull_steps(runner: JobRunner, settings: Any, family_label: str) -> Iterator[tuple[str, Any, str]]:
    """Pull the family's recommended release as a `models pull` job (the Hub cache; offline it resolves from the
    cache alone); yield (status line, no change, the guide) while it runs, then (what it pulled where, the folder
    list with the pulled folder chosen, the guide). Raises InputError when the pull failed (its message says why)."""
    family = FAMILIES[family_label]
    name = family_release(family)
    for job in follow_job(runner, runner.submit("models.pull", {"release": name}), poll=0.5):
        yield job_line(job), gr.update(), gr.update()
    pulled = require_success(job)
    chosen = relative(settings, pulled["folder"])
    found = find_model_folders(settings, family)
    yield (f"{job_line(job)} → {pulled.get('label') or name} in `{chosen}`; chosen as the model folder. "
           "Check the folder next.", gr.update(choices=found, value=chosen), release_guide(family_label, found))


def only_or_kept(choices: list[str], current: str | None) -> str | None:
    """Return the value a refreshed list keeps: the current one while it is listed, else the only choice, else None."""
    if current in choices:
        return current
    return choices[0] if len(choices) == 1 else None


def free_folder_name(settings: Any, base: str) -> str:
    """Return `base`, or `base-2`, `base-3`, … : the first name with no folder under models/ yet."""
    name, number = base, 1
    while (settings.workspace / MODEL.folder / name).exists():
        number += 1
        name = f"{base}-{number}"
    return name


def _whole(value: float | None, what: str, most: int) -> int:
    return int(NumberRange(1, most, integer=True).check(value, what))


def _step_action(label: str, step: str, primary: bool = False) -> tuple[gr.Button, gr.Markdown]:
    """Lay out a step's button (`ft-<step>-btn`) and the status line under it (`ft-<step>-status`); return both."""
    button = gr.Button(label, variant="primary" if primary else "secondary", elem_id=f"ft-{step}-btn")
    return button, gr.Markdown(elem_id=f"ft-{step}-status")


def _listed(choices: list[str], label: str, elem_id: str) -> gr.Dropdown:
    """Return a dropdown of workspace files that also takes a typed path (the previous step chooses its value)."""
    return gr.Dropdown(choices, label=label, allow_custom_value=True, elem_id=elem_id, elem_classes=[PATH_FIELD])


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Fine-tune a published model tab."""
    settings, runner = ctx.settings, ctx.runner

    def follow(kind: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Submit a job of `kind`; yield its record until it ends; raise InputError unless it succeeded."""
        for job in follow_job(runner, runner.submit(kind, params), poll=0.5):
            yield job
        require_success(job)

    def run_step(kind: str, params: dict[str, Any], listed: FileKind, made: Callable[[], str], step: int,
                 note: Callable[[dict[str, Any]], str] = lambda artifacts: "") -> Iterator[tuple[str, Any]]:
        """Run a job of `kind`, yielding (status line, no change); then (its line with the file `made()` names and
        `note(its result)`, the dropdown of step `step` listing the files of kind `listed` with that file chosen)."""
        for job in follow(kind, params):
            yield job_line(job), gr.update()
        result = made()
        yield (f"{job_line(job)} → `{result}`.{note(job.get('artifacts') or {})} Chosen for step {step}.",
               gr.update(choices=find_files(settings, listed), value=result))

    def folder_files(family_label: str, folder: str) -> dict[str, Path]:
        check = check_model_folder(settings, FAMILIES[family_label], require_text(folder, NO_FOLDER))
        if check.missing:
            raise InputError(f"{relative(settings, check.folder)} lacks {', '.join(check.missing)}: step 1 says "
                             f"where to get the published {family_label} files.")
        if not check.ok:
            raise InputError(check.problem or "")
        return check.files

    @ui_action(outputs=3, labels=LABELS)
    def check_folder(family_label: str, folder: str) -> tuple[str, Any, Any]:
        check = check_model_folder(settings, FAMILIES[family_label], require_text(folder, NO_FOLDER))
        if check.missing:  # the release, its files and how to get them, in the dashboard's words
            return (f"**{relative(settings, check.folder)} lacks {', '.join(check.missing)}.** "
                    f"{release_guide(family_label, [folder])}", gr.update(), gr.update())
        files = folder_files(family_label, folder)
        model = get_model_family(FAMILIES[family_label])
        names = ", ".join(sorted(path.name for path in files.values()))
        return (f"The folder holds every published {family_label} file: {names}.",
                relative(settings, files[model.tokenizer_role]), relative(settings, files[model.start_role]))

    @ui_action(outputs=3, labels=LABELS)
    def pull(family_label: str) -> Iterator[tuple[str, Any, str]]:
        yield from pull_steps(runner, settings, family_label)

    @ui_action(outputs=2, labels=LABELS)
    def make_tokenizer(name: str, family_label: str, base: str, corpus: list[str], pieces: float,
                       tag: str) -> Iterator[tuple[str, Any]]:
        from core.tokenizers.tokenizer import load_tokenizer

        name = check_name(name.strip(), "Name of the new model")
        base_path = inside_workspace(settings, require_text(base, "Check the model folder first (step 1)."), "Base tokenizer")
        added = _whole(pieces, "New pieces", MAX_VOCAB)
        texts = paths_param(settings, corpus, "Text of the new language")
        if base_path.suffix == ".json" or base_path.is_dir():  # Chatterbox's JSON, Turbo's folder: merged with one trained on the text
            kind, output = "tokenizer.merge", f"tokenizers/{name}/{name}.json"
            params = {"base": str(base_path), "corpus": texts, "vocab_size": added,
                      "language_tag": None if FAMILIES[family_label] in UNTAGGED else tag.strip() or None}
        else:  # IndexTTS2: a SentencePiece model, extended by the pieces of the text
            kind, output = "tokenizer.extend", f"tokenizers/{name}/{name}.model"
            params = {"base": str(base_path), "corpus": texts, "target_size": load_tokenizer(base_path).size + added}
        params["output"] = str(settings.resolve(output))
        yield from run_step(kind, params, TOKENIZERS, lambda: output, 3,
                            lambda report: sizes_said(report, added) + english_kept(report))

    @ui_action(outputs=2, labels=LABELS)
    def grow(name: str, family_label: str, checkpoint: str, base: str, tokenizer: str, init: str) -> Iterator[tuple[str, Any]]:
        name = check_name(name.strip(), "Name of the new model")
        checkpoint = require_text(checkpoint, "Check the model folder first (step 1).")
        tokenizer = require_text(tokenizer, "Make or choose the new tokenizer first (step 2).")
        output = f"checkpoints/{name}/{name}_grown.safetensors"
        params = {"checkpoint": str(inside_workspace(settings, checkpoint, "Published checkpoint")),
                  "base_tokenizer": str(inside_workspace(settings, base, "Base tokenizer")),
                  "tokenizer": str(inside_workspace(settings, tokenizer, "New tokenizer")),
                  "family": FAMILIES[family_label], "init": init, "output": str(settings.resolve(output))}
        yield from run_step("embeddings.extend", params, CHECKPOINTS, lambda: output, 4)

    @ui_action(outputs=2, labels=LABELS)
    def train(name: str, family_label: str, folder: str, tokenizer: str, grown: str, manifest: str,
              steps: float, keep: str | None, share: float | None) -> Iterator[tuple[str, Any]]:
        name = check_name(name.strip(), "Name of the new model")
        folder_files(family_label, folder)
        data = run_config_data(
            name, FAMILIES[family_label], folder, require_text(tokenizer, "Make or choose the new tokenizer first (step 2)."),
            require_text(grown, "Grow the embeddings first (step 3)."),
            require_text(manifest, "Choose the training data (a manifest of clips in the new language)."),
            _whole(steps, "Training steps", MAX_STEPS), (keep or "").strip() or None,
            SHARE.check(share, "Share of each batch") if (keep or "").strip() else None)
        rel = run_config_path(name)
        config = run_config_from_dict(data, rel)
        check_config_paths(config, settings)
        run = run_folder(settings, name)
        if run.is_running():
            raise InputError(f"{name} is training already; wait for it or choose another name.")
        save_run_config(config, settings.resolve(rel))

        def last_checkpoint() -> str:
            checkpoints = run.step_checkpoints()
            if not checkpoints:
                raise InputError(f"the run {name} saved no checkpoint; its log is in the Jobs tab.")
            return relative(settings, checkpoints[-1])

        yield from run_step("train", {"config": rel}, CHECKPOINTS, last_checkpoint, 5)

    @ui_action(outputs=2, labels=LABELS)
    def speak(name: str, folder: str, checkpoint: str, text: str, tag: str, voice: str,
              max_tokens: float) -> Iterator[tuple[str, Any]]:
        name = check_name(name.strip(), "Name of the new model")
        path = inside_workspace(settings, require_text(checkpoint, "Train first (step 4) or choose a checkpoint."),
                                "Checkpoint")
        output = settings.workspace / "outputs" / name / f"sample-{time.strftime('%Y%m%d-%H%M%S')}.wav"
        params = {"checkpoint": str(path), "text": require_text(text, "Enter the text to speak."),
                  "output": str(output), "language": tag.strip() or None,
                  "model_dir": str(inside_workspace(settings, require_text(folder, NO_FOLDER),
                                                    "Model folder")),
                  "reference": str(inside_workspace(settings, voice, "Voice")) if voice else None,
                  "max_new_tokens": _whole(max_tokens, "Longest sample", MAX_NEW_TOKENS)}
        for job in follow("synthesize", params):
            yield job_line(job), gr.update()
        yield f"{job_line(job)} → `{relative(settings, output)}`", str(output)

    folders = find_model_folders(settings, FAMILIES["Chatterbox"])
    manifests = find_files(settings, TRAINING_MANIFESTS)
    base_clips = base_language_manifest(settings)
    first_manifest = new_language_manifest(manifests, base_clips)
    try:
        voices = voice_clips(ctx, first_manifest)
    except InputError:  # an unusable manifest: its error shows once it is chosen
        voices = []
    with gr.Tab("Fine-tune a published model", id="finetune") as tab:
        gr.Markdown("Teach a published Chatterbox, Chatterbox-Turbo / Nano, IndexTTS2 or Sesame CSM model a new language, one step "
                    "at a time. Each step runs as a job (Jobs tab); its result is chosen in the next step. "
                    "(Turbo takes a voice clip longer than 5 seconds.)")
        with gr.Row():
            name = gr.Textbox("am", label="Name of the new model (names its tokenizer, checkpoints and run)",
                              elem_id="ft-name")
            family = gr.Radio(list(FAMILIES), value="Chatterbox", label="Published model", elem_id="ft-family")
        gr.Markdown("### 1. The published model folder")
        with gr.Row():
            folder = gr.Dropdown(folders, value=folders[0] if folders else None, label="Model folder",
                                 allow_custom_value=True, elem_id="ft-folder", scale=3)
            check_btn = gr.Button("Check the folder", elem_id="ft-check-btn", scale=1)
            folder_upload = gr.UploadButton("Upload a model folder (its files, or a zip)", file_count="multiple",
                                            size="sm", elem_id="ft-folder-upload", scale=1)
        with gr.Row():
            release = gr.Markdown(release_guide("Chatterbox", folders), elem_id="ft-release")
            pull_btn = gr.Button("Pull the published release", elem_id="ft-pull-btn", scale=0, min_width=220)
        folder_status = gr.Markdown(elem_id="ft-folder-status")
        gr.Markdown("### 2. The new-language tokenizer (English encodings kept)")
        with gr.Row():
            base_tok = gr.Textbox(label="Base tokenizer (from the folder)", interactive=False, elem_id="ft-base-tokenizer")
            corpus = corpus_field(settings, "Text of the new language", "ft-corpus", text_of_language(settings, "am"))
            corpus_upload = gr.UploadButton("Upload a text (.txt)", file_types=[".txt"], size="sm",
                                            elem_id="ft-corpus-upload")
            pieces = gr.Number(400, label="New pieces", precision=0, elem_id="ft-pieces")
            tag = gr.Textbox("am", label="Language tag", elem_id="ft-tag")
        tok_btn, tok_status = _step_action("Make the tokenizer", "tok")
        gr.Markdown("### 3. The grown embeddings")
        with gr.Row():
            new_tok = _listed(find_files(settings, TOKENIZERS), "New tokenizer", "ft-tokenizer")
            base_ckpt = gr.Textbox(label="Published checkpoint (from the folder)", interactive=False, elem_id="ft-base-checkpoint")
            init = gr.Dropdown(init_choices(), value="fvt", label="Start of the new rows")
        grow_btn, grow_status = _step_action("Grow the embeddings", "grow")
        gr.Markdown("### 4. Training")
        with gr.Row():
            grown = _listed(find_files(settings, CHECKPOINTS), "Grown checkpoint", "ft-grown")
            manifest = gr.Dropdown(manifests, value=first_manifest, label="Training data (manifest)",
                                   allow_custom_value=True, elem_id="ft-manifest")
            steps = gr.Number(200, label="Training steps", precision=0, elem_id="ft-steps")
        with gr.Row():
            keep = gr.Dropdown(["", *manifests], value=base_clips, allow_custom_value=True,
                               label=f"Keep the base language: its clips ({BASE_LANGUAGE}) mixed into every batch "
                                     "(empty = none)", elem_id="ft-keep")
            share = gr.Number(DEFAULT_RETENTION["share"], label="Share of each batch from those clips", minimum=0.01,
                              maximum=0.99, elem_id="ft-keep-share")
        keep_note = gr.Markdown(keep_words(base_clips, DEFAULT_RETENTION["share"]), elem_id="ft-keep-note")
        train_btn, train_status = _step_action("Train", "train", primary=True)
        gr.Markdown("### 5. A first spoken sample")
        with gr.Row():
            trained = _listed(find_files(settings, CHECKPOINTS), "Checkpoint", "ft-checkpoint")
            text = gr.Textbox(label="Text to speak", elem_id="ft-text")
            voice = gr.Dropdown(voices, value=voices[0] if voices else None, label="Voice (a clip of the training data)",
                                allow_custom_value=True, elem_id="ft-voice")
            max_tokens = gr.Number(250, label="Longest sample (speech tokens; Chatterbox makes 25 a second, CSM 12.5)",
                                   precision=0, elem_id="ft-max-tokens")
        voice_upload = gr.UploadButton("Upload a voice clip", file_types=["audio"], size="sm", elem_id="ft-voice-upload")
        speak_btn, speak_status = _step_action("Speak", "speak", primary=True)
        audio = gr.Audio(label="Sample (24 kHz for Chatterbox, Turbo and CSM)", type="filepath", interactive=False, elem_id="ft-audio",
                         buttons=["download"])

    check_btn.click(check_folder, [family, folder], [folder_status, base_tok, base_ckpt])
    long_action(pull_btn, pull, family, [folder_status, folder, release])
    long_action(tok_btn, make_tokenizer, [name, family, base_tok, corpus, pieces, tag], [tok_status, new_tok])
    long_action(grow_btn, grow, [name, family, base_ckpt, base_tok, new_tok, init], [grow_status, grown])
    long_action(train_btn, train, [name, family, folder, new_tok, grown, manifest, steps, keep, share],
                [train_status, trained])
    long_action(speak_btn, speak, [name, folder, trained, text, tag, voice, max_tokens], [speak_status, audio])

    @ui_action(outputs=2)
    def voices_of(chosen: str) -> tuple[str, Any]:
        clips = voice_clips(ctx, chosen)
        return "", gr.update(choices=clips, value=clips[0] if clips else None)

    manifest.change(voices_of, manifest, [train_status, voice], show_progress="hidden")
    for keeping in (keep, share):
        keeping.change(keep_words, [keep, share], keep_note, show_progress="hidden")

    def listed_folders(family_label: str) -> tuple[Any, str]:
        found = find_model_folders(settings, FAMILIES[family_label])
        return gr.update(choices=found, value=found[0] if found else None), release_guide(family_label, found)

    # The tab's refresh, a family change and a folder upload all set the folder list: one at a time, in the order
    # they came, so a refresh computed for the family shown when the tab opened cannot overwrite a quick change's.
    folder_list = {"concurrency_id": "ft-folder-list", "concurrency_limit": 1}
    family.change(listed_folders, family, [folder, release], show_progress="hidden", **folder_list)

    def refresh(family_label: str, current_folder: str | None, current_manifest: str | None, current_corpus: list[str],
                language: str, current_keep: str | None) -> tuple[Any, ...]:
        checkpoints = find_files(settings, CHECKPOINTS)
        folders_now = find_model_folders(settings, FAMILIES[family_label])
        manifests_now = find_files(settings, TRAINING_MANIFESTS)
        base_now = base_language_manifest(settings)
        return (gr.update(choices=folders_now, value=only_or_kept(folders_now, current_folder) or current_folder),
                release_guide(family_label, folders_now), gr.update(choices=find_files(settings, TOKENIZERS)),
                gr.update(choices=checkpoints),
                gr.update(choices=manifests_now,
                          value=current_manifest or new_language_manifest(manifests_now, base_now)),
                gr.update(choices=checkpoints), gr.update(choices=find_files(settings, CORPORA),
                                                          value=current_corpus or text_of_language(settings, language)),
                gr.update(choices=["", *manifests_now], value=current_keep or base_now))

    tab.select(refresh, [family, folder, manifest, corpus, tag, keep],
               [folder, release, new_tok, grown, manifest, trained, corpus, keep], show_progress="hidden", **folder_list)

    @ui_action(outputs=3)
    def folder_uploaded(files: Any, family_label: str) -> tuple[Any, ...]:
        name = free_folder_name(settings, FAMILIES[family_label])
        upload_into(settings, MODEL, files, name)
        chosen = f"{MODEL.folder}/{name}"
        found = find_model_folders(settings, FAMILIES[family_label])
        return (f"Uploaded into `{chosen}`; chosen as the model folder. Check the folder next.",
                gr.update(choices=found, value=chosen), release_guide(family_label, found))

    @ui_action(outputs=2)
    def corpus_uploaded(files: Any, chosen: list[str] | None) -> tuple[Any, ...]:
        written = upload_into(settings, CORPUS, files)
        return (f"Uploaded `{written[0]}`; chosen as the text of the new language.",
                gr.update(choices=find_files(settings, CORPORA), value=[*(chosen or []), *written]))

    @ui_action(outputs=2)
    def voice_uploaded(files: Any) -> tuple[Any, ...]:
        written = upload_into(settings, VOICE, files)
        return (f"Uploaded `{written[0]}`; chosen as the voice.",
                gr.update(choices=[*written, *find_files(settings, VOICES)], value=written[0]))

    folder_upload.upload(folder_uploaded, [folder_upload, family], [folder_status, folder, release], **folder_list)
    corpus_upload.upload(corpus_uploaded, [corpus_upload, corpus], [tok_status, corpus])
    voice_upload.upload(voice_uploaded, voice_upload, [speak_status, voice])
