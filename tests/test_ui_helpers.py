"""The dashboard's pure helpers, without a browser: error wording, run config field errors, the
quickstart's overall progress, report links, dataset listing at any depth, typed chart frames."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gradio as gr
import pytest

from core.config import load_settings
from core.errors import InputError
from gradio_app.common import form_message, ui_action
from core.progress import PROGRESS_FILE_ENV, Progress, detached_progress_file, journey_view
from gradio_app.tabs.quickstart import JourneyProgress, journey_html, served_links
from journeys.stages import stage_title
from gradio_app.charts import LOSS_METRICS, metric_frame
from gradio_app.tabs.training import error_field, failure_line, field_error, plain_words


def test_cli_words_become_the_forms_words() -> None:
    text = "synthesize: the following arguments are required: --text. Run `python -m core synthesize --help`."
    assert form_message(text, {"text": "Text"}) == "synthesize: fill in “Text”."
    assert form_message("bad --top-k value", {}) == "bad “top k” value"
    assert form_message("vocab size 5 too small; see python -m core tokenizer train “help”.") == \
        "vocab size 5 too small; see the Tokenizer tab."
    assert form_message("Rebuild the rows: python -m core embeddings extend --checkpoint a.pt --init fvt.") == \
        "Rebuild the rows: the Embeddings tab."
    assert form_message("Re-create it with `python -m core embeddings extend`, which resizes.") == \
        "Re-create it with the Embeddings tab, which resizes."
    assert form_message("stage x: job j1 (train) failed: boom. Full log: `python -m core jobs logs j1`.") == \
        "stage x: job j1 (train) failed: boom. Full log: the Jobs tab."


def test_an_error_goes_to_its_message_output_only() -> None:
    @ui_action(outputs=3, message=1)
    def fails(value: str) -> tuple[str, str, str]:
        raise InputError(f"{value}: the following arguments are required: --vocab-size")

    first, message, last = fails("tokenizer.train")
    assert first == gr.update() and last == gr.update()
    assert message["value"] == "**Error:** tokenizer.train: fill in “vocab size”"

    @ui_action()
    def crashes() -> str:
        raise RuntimeError("boom")

    assert crashes()["value"] == "**Error:** internal error: boom (details in the server log)"


def test_run_config_errors_name_the_field_as_labelled_and_its_range() -> None:
    assert field_error("form.batch.size: 0 must be a positive integer.") == (
        "“Batch size”: 0 must be a positive integer.", "Set “Batch size” to a whole number from 1 up.")
    assert field_error("form.data.val_ratio: 1.5 must be in [0, 1).")[1] == \
        "Set “Validation share” to a number from 0 up to (not including) 1."
    assert field_error("something else")[1] == "Correct the field named in the message."
    assert error_field("form.name 'a/b': not a name. Use one path segment of letters.") == "name"
    assert error_field("form.optim.lr: -1.0 must be positive.") == "lr"
    assert error_field("form.freeze.until: -3 is negative; use a row index ≥ 0 or `auto`.") == "freeze_until"
    assert error_field("something else") is None
    assert plain_words("Set freeze_until to 700.") == "Set “Freeze rows below” to 700."


def _job(status: str, done: int, total: int | None, started: float = 1000.0) -> dict:
    return {"id": "q1", "kind": "quickstart.tts", "status": status, "started_at": started,
            "progress": {"done": done, "total": total,
                         "metrics": {"current": "train.base", "current_title": stage_title("train.base"), "current_job": "s1"}}}


def _stage(status: str, fraction: float | None) -> dict:
    return {"id": "s1", "kind": "train", "status": status, "progress": {"fraction": fraction, "eta_s": 12.0}}


def test_overall_progress_counts_the_running_stage_never_goes_back_and_stays_below_100_until_the_end() -> None:
    journeys = JourneyProgress()
    seen = [
        journeys.view(_job("running", 3, 10), _stage("running", 0.5)).fraction,   # 3.5 / 10
        journeys.view(_job("running", 3, 10), _stage("succeeded", 0.9)).fraction,  # stage done, journey not yet
        journeys.view(_job("running", 4, 10), None).fraction,                       # between stages
        journeys.view(_job("running", 4, 10), _stage("running", 0.1)).fraction,   # a phase restarting lower
        journeys.view(_job("running", 4, 10), _stage("running", 0.05)).fraction,
        journeys.view(_job("running", 10, 10), _stage("running", 1.0)).fraction,  # last stage done, report not yet
        journeys.view(_job("succeeded", 10, 10), None).fraction,
    ]
    assert seen == pytest.approx([0.35, 0.4, 0.4, 0.41, 0.41, 0.99, 1.0])
    assert JourneyProgress().view(_job("running", 1, None), None).fraction == 0.0  # total not known yet


def test_progress_is_one_line_with_plain_stage_name_elapsed_and_a_meaningful_eta() -> None:
    now = 10_000.0
    line = journey_view(_job("running", 3, 10, started=now - 70), _stage("running", 0.5), now=now).text()
    assert line == "running · 35% · stage 4/10: Train the English base model (50%) · elapsed 1m10s · ETA 2m10s"
    first = journey_view(_job("running", 0, 10, started=now - 5), _stage("running", 0.001), now=now).text()
    assert first.endswith("elapsed 5s · ETA after the first stages")  # no "12h16m" from 0.01 % done
    assert "ETA" not in journey_view(_job("succeeded", 10, 10, started=now - 70), None, now=now).text()
    empty = journey_html(journey_view(_job("running", 0, 10, started=now), None, now=now))
    assert 'aria-valuenow="0.0000"' in empty and "width:0.00%" in empty  # a 0 % bar is drawn empty


def test_an_in_process_stage_never_writes_into_its_journeys_progress_file(tmp_path: Path, monkeypatch) -> None:
    journey_file = tmp_path / "journey.progress.json"
    monkeypatch.setenv(PROGRESS_FILE_ENV, str(journey_file))
    journey = Progress("quickstart", total=12, interval=0.0)
    journey.update(7, current_title="Measure the starting model")
    with detached_progress_file():
        stage = Progress("preprocess", total=150, interval=0.0)
        stage.update(150)
        stage.finish()
        journey.update(0)  # the journey still reports to its own file meanwhile
    state = json.loads(journey_file.read_text(encoding="utf-8"))
    assert (state["label"], state["done"], state["total"]) == ("quickstart", 7, 12)
    assert os.environ[PROGRESS_FILE_ENV] == str(journey_file)


def test_a_failed_jobs_reason_is_shown_in_the_dashboards_words() -> None:
    job = {"id": "j1", "status": "failed",
           "error": "x.yaml.model.max_speech_tokens: does not apply to family chatterbox. Run `python -m core train --help`."}
    assert failure_line(job) == "**Job j1 failed:** x.yaml.model.max_speech_tokens: does not apply to family chatterbox."
    assert failure_line({**job, "status": "succeeded"}) == "" and failure_line(None) == ""


def test_job_rows_name_their_run_and_stage() -> None:
    from gradio_app.tabs.jobs import HEADERS, job_rows

    journey = {"id": "q1", "kind": "quickstart.tts", "status": "running", "run_dir": None,
               "progress": {"metrics": {"journey": "qs-1", "stage_jobs": {"s1": stage_title("train.base")}}}}
    stage = {"id": "s1", "kind": "train", "status": "succeeded", "run_dir": "/w/runs/qs-1-en-base", "progress": {}}
    lone = {"id": "t1", "kind": "train", "status": "queued", "run_dir": "/w/runs/my-run", "progress": {}}
    other = {"id": "d1", "kind": "doctor", "status": "queued", "run_dir": None, "progress": {}}
    named = [row[HEADERS.index("run · stage")] for row in job_rows([journey, stage, lone, other])]
    assert named == ["qs-1", "qs-1 · Train the English base model", "my-run", "—"]


def test_a_chart_draws_each_series_in_its_own_colour_with_a_legend() -> None:
    import re

    from gradio_app.charts import PALETTE, chart_html

    rows = [{"step": 5, "mel_loss": 3.0, "text_loss": 4.0}, {"step": 10, "mel_loss": 2.5, "text_loss": 3.5}]
    svg = chart_html(rows, ("mel_loss", "text_loss"), "Validation", split="val")
    lines = re.findall(r'<polyline class="lf-series" data-series="([^"]+)" points="([^"]+)" fill="none" stroke="([^"]+)"', svg)
    assert [(name, len(points.split()), colour) for name, points, colour in lines] == [
        ("val mel_loss", 2, PALETTE[0]), ("val text_loss", 2, PALETTE[1])]
    assert re.findall(r'<g class="lf-legend">.*?<text[^>]*>([^<]+)</text></g>', svg) == ["val mel_loss", "val text_loss"]
    first = [tuple(map(float, p.split(","))) for p in lines[0][1].split()]
    assert first[0][0] < first[1][0] and first[0][1] < first[1][1]  # later step to the right; lower loss lower down
    assert "no points yet" in chart_html([], ("mel_loss",), "Validation")


def test_report_links_point_at_the_file_route(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    settings = load_settings()
    run_dir = tmp_path / "runs" / "qs"
    (run_dir / "audio").mkdir(parents=True)
    (run_dir / "audio" / "am_1.wav").write_bytes(b"RIFF")
    markdown = "| am | ሰላም | [am_1.wav](audio/am_1.wav) |\n[gone](audio/missing.wav) [web](https://x.org/a)"
    shown = served_links(markdown, run_dir, settings)
    assert f"[am_1.wav](/gradio_api/file={(run_dir / 'audio' / 'am_1.wav').resolve()})" in shown
    assert "[gone](audio/missing.wav)" in shown and "[web](https://x.org/a)" in shown


def test_datasets_are_listed_at_any_depth_with_clips_and_hours(tmp_path: Path, monkeypatch) -> None:
    from gradio_app.common import UIContext
    from gradio_app.tabs.dataset import dataset_choices

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    settings = load_settings()
    nested = tmp_path / "datasets" / "quickstart-quick" / "sample"
    nested.mkdir(parents=True)
    rows = [{"id": f"c{i}", "audio": f"audio/c{i}.wav", "text": "t", "duration": 1800.0} for i in range(3)]
    (nested / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    flat = tmp_path / "datasets" / "mine"
    flat.mkdir()
    (flat / "manifest.jsonl").write_text("", encoding="utf-8")
    (flat / "summary.json").write_text(json.dumps({"kept": 7, "hours": 0.25}), encoding="utf-8")
    ctx = UIContext(settings=settings, runner=None)  # type: ignore[arg-type]
    assert dataset_choices(ctx) == [("mine — 7 clips, 0.250 h", "mine"),
                                    ("quickstart-quick/sample — 3 clips, 1.500 h", "quickstart-quick/sample")]


def test_chart_frames_are_numeric_even_when_empty() -> None:
    empty = metric_frame([], LOSS_METRICS)
    assert gr.LinePlot(empty, x="step", y="value", color="series").get_config()["value"]["datatypes"] == {
        "step": "quantitative", "value": "quantitative", "series": "nominal"}
    rows = [{"step": 1, "split": "train", "loss": 2.5}, {"step": 2, "split": "train", "loss": 2.0},
            {"step": 2, "split": "val", "loss": 2.2, "mel_loss": 1.1}]
    frame = metric_frame(rows, LOSS_METRICS)
    assert frame.values.tolist() == [[1, 2.5, "train loss"], [2, 2.0, "train loss"], [2, 2.2, "val loss"],
                                     [2, 1.1, "val mel_loss"]]


def test_dashboard_paths_show_relative_to_the_workspace_whatever_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gradio_app.common import relative

    workspace, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
    monkeypatch.chdir(elsewhere)
    settings = load_settings()
    assert relative(settings, "codecs/sample.pt") == "codecs/sample.pt"
    assert relative(settings, workspace / "runs" / "a" / "config.yaml") == "runs/a/config.yaml"
    assert relative(settings, elsewhere / "x.wav") == str((elsewhere / "x.wav").resolve())


def test_preflight_loads_the_base_checkpoint_once_per_file_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Training tab's live preflight reads and hashes an unchanged base checkpoint once; a changed file
    (new size, or only a new mtime) is read again, and its new rows are what the doctor judges."""
    import os

    import torch

    import core.checkpoint
    from core.checkpoint import save_checkpoint
    from core.cli.catalogue import cli_catalogue
    from gradio_app.common import UIContext
    from gradio_app.runner import JobRunner
    from gradio_app.tabs.training import form_values, load_config_source, preflight
    from tests.trainer_helpers import lm_config, lm_workspace

    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
    lm_workspace(workspace)  # a 1135-id tokenizer
    (workspace / "presets").mkdir()  # a loader opens only what it lists: workspace presets are listed
    lm_config(workspace, "cached", base_checkpoint="checkpoints/base.safetensors").rename(workspace / "presets" / "cached.yaml")
    base = workspace / "checkpoints" / "base.safetensors"

    def write_base(rows: int) -> None:
        save_checkpoint(base, {"text_emb.weight": torch.randn(rows, 8), "text_head.weight": torch.randn(rows, 8)}, None)

    loads: list[Path] = []
    real_load = core.checkpoint.load_checkpoint

    def counting_load(path, *args, **kwargs):  # the real loader, counted
        loads.append(Path(path))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(core.checkpoint, "load_checkpoint", counting_load)
    settings = load_settings()
    ctx = UIContext(settings, JobRunner(settings, cli_catalogue()))
    data = load_config_source(ctx, "presets/cached.yaml")

    def rows_check() -> list[str]:
        rows, _, _, _ = preflight(ctx, data, form_values(data, settings))
        return next(row for row in rows if row[0] == "checkpoint.rows")

    write_base(1135)
    for _ in range(3):
        assert rows_check()[1] == "PASS"
    assert loads == [base]

    write_base(1000)  # another size: read again, and the doctor sees the new rows
    first = rows_check()
    assert first[1] == "FAIL" and "1000 rows" in first[2]
    assert rows_check() == first and loads == [base, base]

    stat = base.stat()  # same size, only a new mtime: a new version too
    os.utime(base, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert rows_check() == first and rows_check() == first
    assert loads == [base, base, base]
