"""The dashboard's pure helpers, without a browser: error wording, run config field errors, the
quickstart's weighted progress, report links, dataset listing at any depth, the Plotly figures, uploads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gradio as gr
import pytest

from core.config import load_settings
from core.errors import InputError
from gradio_app.common import form_message, ui_action
from core.progress import (
    GUESSED, PROGRESS_FILE_ENV, JourneyClock, Progress, StagePlan, detached_progress_file, journey_view, plan_stages,
)
from gradio_app.tabs.quickstart import journey_html, served_links
from journeys.stages import stage_title
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


PLAN = StagePlan(("sample", "train.base", "eval.tts"), (10.0, 30.0, 60.0), "the preset's measured figures")


def test_each_stage_weighs_its_measured_seconds_and_its_own_fraction_or_time() -> None:
    clock = JourneyClock(PLAN)
    clock.current = "sample"
    assert clock.state(None, 5.0)["fraction"] == pytest.approx(0.05)  # half its 10 s: 5 of 100 weighted seconds
    assert clock.state(None, 50.0)["fraction"] == pytest.approx(0.09)  # time alone shows at most 90% of a stage
    clock.ended["sample"], clock.current = 10.0, "train.base"
    state = clock.state(0.5, 3.0)  # its own report (50%) is ahead of its time (10%)
    assert state["fraction"] == pytest.approx(0.25) and state["stage_fraction"] == pytest.approx(0.5)
    # its first report gives no speed yet (its start-up is in it): its 30 measured seconds less the 3 gone, then 60
    assert state["eta_s"] == pytest.approx(87.0) and not state["eta_sure"]  # one stage ended: still a guess, widened
    assert state["eta_note"] == "a guess until more stages end"
    assert (state["eta_low_s"], state["eta_high_s"]) == pytest.approx((87.0 / 1.5, 87.0 * 1.5))
    assert clock.state(0.1, 3.0)["fraction"] == pytest.approx(0.25)  # a phase restarting lower never moves it back
    state = clock.state(0.75, 6.0)  # its own speed since its first report: 3 s a quarter, so 3 s more; the later
    # 60 measured seconds at this run's speed with the stage's seconds in it, 16 s for 32.5 expected
    assert state["eta_s"] == pytest.approx(3.0 + 60 * 16 / 32.5, abs=0.1) and state["speed"] == pytest.approx(16 / 32.5, abs=1e-3)
    clock.ended["train.base"], clock.current = 30.0, "eval.tts"
    state = clock.state(None, 6.0)
    assert state["fraction"] == pytest.approx(0.46) and state["eta_sure"] and state["eta_s"] == pytest.approx(54.0)
    assert state["eta_low_s"] == state["eta_high_s"] == state["eta_s"] and state["eta_note"] is None
    assert clock.state(1.0, 600.0)["fraction"] == 0.99  # the last stage done, the journey not yet: below 100%


def test_an_overdue_stage_never_freezes_the_eta_and_says_it_runs_long() -> None:
    """The quickstart's 127 s at 96% with the ETA frozen at 1m04s: a stage past its estimate that reports nothing
    is taken as 90% done, so its ETA grows with its time (and this run's speed with it), labelled and widened."""
    clock = JourneyClock(PLAN)
    clock.ended.update(sample=10.0, **{"train.base": 30.0})
    clock.current = "eval.tts"
    etas = [clock.state(None, t)["eta_s"] for t in (30.0, 50.0, 54.0, 60.0, 90.0, 150.0)]
    assert etas[:3] == pytest.approx([30.0, 10.0, 6.0])  # within its 60 s: the rest of them
    assert etas[3] < etas[4] < etas[5] and etas[5] == pytest.approx(150.0 / 9)  # overdue: t × 10/90, still moving
    late = clock.state(None, 150.0)
    assert not late["eta_sure"] and late["eta_note"] == "this stage runs longer than measured"
    assert late["eta_high_s"] == pytest.approx(late["eta_s"] * 3) and late["speed"] == pytest.approx(190 / 94, abs=1e-3)
    assert late["fraction"] == pytest.approx(0.94)  # the fraction still stops at 90% of the stage's share


def test_a_slower_machine_scales_the_eta_and_the_time_estimate_not_the_weights() -> None:
    clock = JourneyClock(PLAN)
    clock.ended["sample"], clock.current = 20.0, "train.base"  # this machine took twice the measured seconds
    state = clock.state(None, 30.0)  # half of train.base's 60 s here
    assert state["speed"] == 2.0 and state["fraction"] == pytest.approx(0.25)
    assert state["eta_s"] == pytest.approx(150.0)  # the 75 weighted seconds left, at this run's speed


def test_a_plan_with_a_stage_never_measured_is_a_guess() -> None:
    plan = plan_stages(["a", "b", "c"], {"a": 10, "c": 30}, "the preset's measured figures")
    assert plan.seconds == (10.0, 30.0, 30.0) and plan.source == GUESSED and not plan.measured
    clock = JourneyClock(plan)
    clock.ended.update(a=10.0, b=30.0)
    clock.current = "c"
    assert not clock.state(0.5, 15.0)["eta_sure"]
    assert plan_stages(["a"], {"a": 4}, "x").source == "x"


def _journey(status: str, progress: dict, started: float = 1000.0) -> dict:
    return {"id": "q1", "kind": "quickstart.tts", "status": status, "started_at": started, "progress": progress}


def test_progress_is_one_line_with_plain_stage_name_elapsed_and_an_eta_that_says_when_it_guesses() -> None:
    now = 10_000.0
    metrics = {"current": "train.base", "current_title": stage_title("train.base"), "stage": 4, "stages": 10,
               "stage_fraction": 0.5, "eta_sure": True, "speed": 1.0}
    line = journey_view(_journey("running", {"fraction": 0.35, "eta_s": 130.0, "metrics": metrics}, now - 70),
                        now=now).text()
    assert line == "running · 35% · stage 4/10: Train the English base model (50%) · elapsed 1m10s · ETA 2m10s"
    waiting = {**metrics, "stage_waits_for": "waiting for the device slot held by training 'mine', none ahead"}
    line = journey_view(_journey("running", {"fraction": 0.35, "eta_s": 130.0, "metrics": waiting}, now - 70),
                        now=now).text()
    assert ("stage 4/10: Train the English base model (50%), its job waiting for the device slot held by training "
            "'mine', none ahead · elapsed") in line
    unsure = {**metrics, "eta_sure": False, "speed": 1.6, "eta_note": "a guess until more stages end",
              "eta_low_s": 400.0, "eta_high_s": 900.0}
    line = journey_view(_journey("running", {"fraction": 0.05, "eta_s": 600.0, "metrics": unsure}, now - 5), now=now).text()
    assert line.endswith("ETA about 10m00s (6m40s to 15m00s: a guess until more stages end) · 1.6× slower than "
                         "measured (a busy or slower machine)"), line
    done = journey_view(_journey("succeeded", {"fraction": 0.99, "eta_s": 0.0, "metrics": metrics}, now - 70), now=now)
    assert done.fraction == 1.0 and "ETA" not in done.text() and "stage" not in done.text()
    empty = journey_html(journey_view(_journey("running", {}, now), now=now))
    assert 'aria-valuenow="0.0000"' in empty and "width:0.00%" in empty  # a 0 % bar is drawn empty


def test_the_last_run_of_the_same_preset_on_this_machine_weighs_the_stages(tmp_path: Path, monkeypatch) -> None:
    from journeys.stages import LAST_RUN, PRESET_FIGURES, expected_seconds

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    settings = load_settings()
    names = ["sample", "codec"]
    preset = {"stage_seconds": {"sample": 26.4, "codec": 5.3}}
    assert expected_seconds(settings, "tts", preset, "abc", names) == StagePlan(("sample", "codec"), (26.4, 5.3),
                                                                                PRESET_FIGURES)
    for run, fingerprint, seconds in (("old", "abc", 40.0), ("other-preset", "xyz", 99.0), ("new", "abc", 50.0)):
        (tmp_path / "runs" / run).mkdir(parents=True)
        (tmp_path / "runs" / run / "report.json").write_text(json.dumps({
            "journey": "tts", "preset_sha256": fingerprint,
            "stages": [{"name": "sample", "seconds": seconds}, {"name": "codec", "seconds": 8.0}]}))
        os.utime(tmp_path / "runs" / run / "report.json", (1000 + seconds, 1000 + seconds))
    assert expected_seconds(settings, "tts", preset, "abc", names) == StagePlan(("sample", "codec"), (50.0, 8.0), LAST_RUN)
    assert expected_seconds(settings, "tts", preset, "abc", [*names, "eval.tts"]).source == GUESSED  # not measured


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


def test_table_cells_say_in_words_what_the_issue_saw_in_keys_code_paths_and_flags(tmp_path: Path, monkeypatch) -> None:
    from gradio_app.common import plain_text
    from gradio_app.tabs.tokenizer import report_tables
    from tests.browser_helpers import internal_words

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    settings = load_settings()
    seen = (f"base_size 700 is recorded; the rows were made with `mean`; Paths are relative to the workspace: "
            f"{tmp_path}/runs/x/config.yaml. Pass --target-size 763 (tokenizers/en_am.model).")
    said = plain_text(seen, settings)
    assert said == ("base size 700 is recorded; the rows were made with “mean”; Paths are relative to the workspace: "
                    "runs/x/config.yaml. Pass “target size” 763 (tokenizers/en_am.model).")
    assert internal_words(seen) and not internal_words(said)
    summary, _, _ = report_tables({"size": 5, "kind": "sentencepiece", "fingerprint": "f", "corpus": None,
                                   "special_ids": {"bos": 0, "eos": 1, "pad": None}})
    assert ["special ids", "bos 0, eos 1, pad none"] in summary


def test_the_english_verdict_says_in_words_what_the_numbers_mean() -> None:
    from journeys.report import base_language_summary

    flags = {"quality": {"flags_raised": ["text_ignored"]}}
    model = {"rows": {"model": {"dtw_identification": 0.5, "mcd_db": 9.0}, "codec": {"dtw_identification": 0.9}},
             "chance": 0.25}
    line = base_language_summary({"before": {**model, "quality": {}}, "after": {**model, **flags},
                                  "val_base_loss_change": 1.0579, "val_base_loss_start": 2.85, "val_base_loss_end": 5.865})
    assert line.startswith("English **lost** through the Amharic fine-tune: the model predicts held-out English speech "
                           "106% worse than before the fine-tune (validation loss 2.85 → 5.865; kept up to +10%, lost "
                           "beyond +50%); ")
    assert "failure flags none → the speech no longer follows its sentence" in line
    better = base_language_summary({"val_base_loss_change": -0.1, "val_base_loss_start": 3.0, "val_base_loss_end": 2.7})
    assert better.startswith("English **kept** through the Amharic fine-tune: the model predicts held-out English "
                             "speech 10% better")


def test_a_queued_job_says_what_it_waits_for_in_the_jobs_tab_and_the_tab_that_submitted_it() -> None:
    from gradio_app.common import job_line
    from gradio_app.tabs.jobs import HEADERS, job_rows

    reason = "waiting for the device slot held by training 'long', 1 ahead"
    job = {"id": "t2", "kind": "train", "status": "queued", "run_dir": "/w/runs/next", "progress": {}, "waits_for": reason}
    assert job_rows([job])[0][HEADERS.index("progress")] == reason
    assert job_line(job) == f"Training job `t2`: **queued** — {reason}"
    assert "waiting" not in job_line({**job, "status": "running", "waits_for": None})


ROWS = [{"step": 1, "split": "train", "loss": 2.5, "mel_loss": 2.5, "text_loss": 6.7},
        {"step": 2, "split": "train", "loss": 2.0, "mel_loss": 2.0, "text_loss": 6.7},
        {"step": 2, "split": "val", "loss": 2.2, "mel_loss": 2.2, "text_loss": 6.8}]


def test_a_loss_with_weight_0_and_the_total_that_repeats_its_parts_are_not_drawn() -> None:
    from gradio_app.charts import LOSS_MEASURES, metrics_figure

    figure = metrics_figure(ROWS, LOSS_MEASURES, "Loss", {"text_weight": 0.0, "mel_weight": 1.0})
    assert [(t.name, list(t.x), list(t.y)) for t in figure.data] == [
        ("speech loss (speech codes) · training", [1, 2], [2.5, 2.0]),
        ("speech loss (speech codes) · validation", [2], [2.2])]
    assert "text loss (next text piece): not drawn, its weight in this run is 0" in figure.layout.title.subtitle.text
    both = metrics_figure(ROWS, LOSS_MEASURES, "Loss", {"text_weight": 0.4, "mel_weight": 0.6})
    assert [t.name for t in both.data] == [  # speech and text losses each on their own axis, no total
        "speech loss (speech codes) · training", "speech loss (speech codes) · validation",
        "text loss (next text piece) · training", "text loss (next text piece) · validation"]
    assert {t.yaxis for t in both.data} == {"y", "y2"} and all(t.mode == "lines+markers" for t in both.data)
    lm = metrics_figure([{"step": 5, "loss": 3.0, "bpb": 2.1}], LOSS_MEASURES, "Loss")
    assert [(t.name, list(t.x)) for t in lm.data] == [("loss · training", [5]), ("bits per byte · training", [5])]
    assert not metrics_figure([], LOSS_MEASURES, "Loss").data  # "no points yet", drawn as words


def test_bar_charts_keep_their_order_and_values() -> None:
    from gradio_app.charts import histogram_figure
    from gradio_app.tabs.tokenizer import report_tables

    bars = histogram_figure({"0-1": 2, "1-2": 7, "3-4": 1}).data[0]
    assert (list(bars.x), list(bars.y)) == (["0-1 s", "1-2 s", "3-4 s"], [2, 7, 1])
    from core.data.filters import duration_histogram
    from gradio_app.tabs.dataset import filter_view

    # an empty bin is drawn as 0, so a gap shows: in a new histogram and in an older summary's that left it out
    assert duration_histogram([0.5, 3.2, 3.9]) == {"0-1": 1, "1-2": 0, "2-3": 0, "3-4": 2}
    stored = filter_view({"filters": {"duration_histogram": {"0-1": 2, "3-4": 1}}})[1].data[0]
    assert (list(stored.x), list(stored.y)) == (["0-1 s", "1-2 s", "2-3 s", "3-4 s"], [2, 0, 0, 1])
    report = {"size": 1000, "kind": "sentencepiece", "fingerprint": "f", "corpus": {
        "lines": 10, "tokens": 100, "unk_rate": 0.0, "chars_per_token": 3.0, "bytes_per_token": 3.5,
        "unused_share": 0.848, "ids_used": 152, "unknown_characters": []}}
    chart = report_tables(report)[2].data[0]
    assert list(chart.x) == ["ids used", "ids never used"] and list(chart.y) == pytest.approx([0.152, 0.848])


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


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
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
    from gradio_app.tabs.training import check_words, form_values, load_config_source, preflight
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
        return next(row for row in rows if row[0] == check_words("checkpoint.rows"))

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


def test_the_journey_writes_its_progress_every_second_with_the_running_stage_jobs_own_fraction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While a stage job runs, the stage runner's ticker reads that job's record every second and writes the
    journey's weighted fraction with the stage's own fraction into the journey's progress file."""
    import time

    from core.cli.catalogue import cli_catalogue
    from jobs.runner import JobRunner
    from journeys.stages import StageRunner

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    journey_file = tmp_path / "journey.progress.json"
    monkeypatch.setenv(PROGRESS_FILE_ENV, str(journey_file))
    settings = load_settings()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox\n" * 50)
    runner = JobRunner(settings, catalogue=cli_catalogue())  # no worker: the job stays queued while we look
    job_id = runner.submit("tokenizer.train", {"corpus": [str(corpus)], "vocab_size": 60,
                                               "output": str(tmp_path / "tok.model")})
    runner.store.update(job_id, progress={"done": 3, "total": 4})
    plan = StagePlan(("sample", "tokenizer.base"), (30.0, 10.0), "the preset's measured figures")
    with StageRunner(settings, "queue", embedded_worker=False, plan=plan, catalogue=cli_catalogue()) as stages:
        with stages._lock:  # as `run` sets it once the stage's job is submitted
            stages.clock.ended["sample"] = 30.0
            stages.clock.current, stages._stage_start = "tokenizer.base", time.monotonic()
            stages.metrics.update(current="tokenizer.base", current_title="Train the English tokenizer",
                                  current_job=job_id)
        deadline = time.monotonic() + 30
        state: dict = {}
        while time.monotonic() < deadline and not (state.get("metrics") or {}).get("stage_fraction"):
            time.sleep(0.5)
            state = json.loads(journey_file.read_text()) if journey_file.is_file() else {}
    assert state["metrics"]["stage_fraction"] == pytest.approx(0.75)  # the job's own 3 of 4
    assert state["fraction"] == pytest.approx((30 + 0.75 * 10) / 40)
    assert (state["metrics"]["stage"], state["metrics"]["stages"]) == (2, 2)


def test_compare_and_quality_open_the_evaluation_written_last(tmp_path: Path, monkeypatch) -> None:
    """After a quickstart, Compare and Quality open its own checkpoint's evaluation (`checkpoints/<name>`), not the
    English base model's side evaluation (`runs/<name>-en-base`) written a stage before it; an evaluation written
    later (the user's own) is the one opened then."""
    from gradio_app.common import UIContext
    from gradio_app.tabs.compare import eval_folders, newest_eval_folder

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    ctx = UIContext(settings=load_settings(), runner=None)  # type: ignore[arg-type]
    assert newest_eval_folder(ctx) is None
    base = tmp_path / "runs" / "qs-en-base" / "checkpoints" / "eval.json"
    final = tmp_path / "checkpoints" / "qs" / "eval.json"
    for order, path in enumerate((base, final)):  # the journey's order: eval.en.base, then eval.tts
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"checkpoints": {}}), encoding="utf-8")
        os.utime(path, (1000 + order, 1000 + order))
    assert eval_folders(ctx) == ["checkpoints/qs", "runs/qs-en-base"]
    assert newest_eval_folder(ctx) == "checkpoints/qs"
    os.utime(base, (2000, 2000))  # the English base evaluated again later: now it is the newest
    assert newest_eval_folder(ctx) == "runs/qs-en-base"


def test_the_built_in_quick_preset_weighs_every_stage_it_runs_by_a_measured_figure(tmp_path: Path, monkeypatch) -> None:
    """Each stage the quick preset's journey runs (the English measures included) has its measured seconds in
    the preset, so its progress line is weighed, not guessed; a stage added to the journey fails here first."""
    from journeys.quickstart import load_preset, preset_fingerprint, tts_stage_names
    from journeys.stages import PRESET_FIGURES, expected_seconds

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    spec = load_preset("quick", "tts")
    names = tts_stage_names(spec)
    assert {"validate.en.start", "validate.en.end", "eval.en.base", "eval.tts"} <= set(names)
    assert set(spec["stage_seconds"]) == set(names)
    plan = expected_seconds(load_settings(), "tts", spec, preset_fingerprint(spec), names)
    assert plan.source == PRESET_FIGURES and plan.names == tuple(names)


def test_export_refuses_to_prune_over_an_existing_file_unless_replace_is_ticked(tmp_path: Path, monkeypatch) -> None:
    """Prune's output that exists is refused before a job is submitted, naming the Replace box; ticked, it is taken
    (the job then runs with `force`)."""
    from gradio_app.tabs.export import PRUNE, check_output

    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(tmp_path))
    settings = load_settings()
    checkpoint = tmp_path / "runs" / "r" / "checkpoints" / "step_1.pt"
    existing = tmp_path / "checkpoints" / "exported" / "model.safetensors"
    existing.parent.mkdir(parents=True)
    existing.write_bytes(b"an earlier prune")
    with pytest.raises(InputError, match="the file exists. Tick \"Replace the output file\""):
        check_output(settings, PRUNE, checkpoint, "checkpoints/exported/model.safetensors")
    assert check_output(settings, PRUNE, checkpoint, "checkpoints/exported/model.safetensors", replace=True) == \
        str(existing.resolve())
    assert existing.read_bytes() == b"an earlier prune"  # nothing written by the check
