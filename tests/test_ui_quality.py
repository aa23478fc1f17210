"""The Quality tab in a real browser (real app.py, Debian chromium through Playwright): a run's evaluated
checkpoints as a table with each failure flag in words, why best.pt is best and the base-language
warning from status.json, a panel per measure (read from the figure Plotly drew), and a player for every
evaluation sentence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core.audio import write_wav
from core.eval.tts import update_eval_json
from tests.browser_helpers import chromium_page, chromium_path, running_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]
pytest.importorskip("playwright.sync_api")

SENTENCES = ["The morning train was late.", "She opened the window.", "We walked to the river."]


def _flag(name: str, flagged: bool, words: str) -> dict:
    return {"name": name, "value": 1.0 if flagged else 0.0, "threshold": 0.1, "flagged": flagged, "words": words}


def _entry(step: int, looping: bool) -> dict:
    flags = {name: _flag(name, False, f"{name} quiet") for name in
             ("no_stop", "length_out_of_range", "prompt_copying", "text_ignored")}
    flags["loops"] = _flag("loops", looping, "67% of outputs repeat one stretch" if looping else "0% of outputs loop")
    return {"step": step, "language": "en", "chance": 0.3333, "sentences": 3, "audio": [f"{i:03d}.wav" for i in (1, 2, 3)],
            "rows": {"model": {"dtw_identification": 0.33 if looping else 1.0, "mcd_db": 9.0,
                               "per_sentence": [{"sentence": s} for s in SENTENCES]}},
            "quality": {"flags": flags, "flags_raised": ["loops"] if looping else [], "speaker_similarity": 0.71,
                        "mos_estimate": 2.9, "cer": None, "per_sentence": []},
            "sections": {"new_language": {"role": "new_language", "language": "en", "asked": 20, "used": 3},
                         "base_language": {"role": "base_language", "language": "de", "asked": 10, "used": 4,
                                           "flags_raised": ["text_ignored"] if looping else [],
                                           "dtw_identification": 0.25 if looping else 0.75}}}


def test_quality_tab_shows_flags_in_words_best_reason_charts_and_audio(tmp_path: Path) -> None:
    chromium_path()
    workspace = tmp_path / "workspace"
    run = workspace / "runs" / "qrun"
    checkpoints = run / "checkpoints"
    for step in (2, 4):
        stem = f"step_000000{step}"
        (checkpoints / f"{stem}.pt").parent.mkdir(parents=True, exist_ok=True)
        (checkpoints / f"{stem}.pt").write_bytes(b"checkpoint")
        for i in (1, 2, 3):
            write_wav(checkpoints / "eval_audio" / stem / f"{i:03d}.wav", 0.1 * torch.sin(torch.arange(8000) * 0.05 * i), 16000)
        update_eval_json(checkpoints / "eval.json", f"{stem}.pt", _entry(step, looping=step == 2))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "split": "eval", "val_base_loss": v}) + "\n"
                                               for s, v in ((2, 3.1), (4, 3.9))))
    (run / "status.json").write_text(json.dumps({
        "state": "finished", "step": 4,
        "best": {"metric": "quality", "step": 4, "why": "step 4: no failure flag, then dtw_identification 1.000; beats step 2",
                 "parts": {"flags_raised": [], "intelligibility": {"measure": "dtw_identification", "value": 1.0},
                           "val_loss": 2.5}},
        "retention": {"val_base_loss": 3.9, "start": 3.0, "change": 0.3, "step": 4, "warn_share": 0.1,
                      "warning": "base-language loss (val_base_loss) rose 30% since step 0"}}))
    with running_app(workspace, tmp_path / "app.log") as app, chromium_page(app.url, "Quality") as page:
        field = page.locator("#q-folder input").first
        field.fill("runs/qrun")
        field.press("Enter")
        field.blur()
        page.wait_for_function("() => document.querySelector('#q-table').innerText"
                               ".includes('FLAG — 67% of outputs repeat one stretch')")
        table = page.locator("#q-table").inner_text()
        assert "ok — 0% of outputs loop" in table and "step_0000002.pt" in table and "0.71" in table
        assert "de (4 sentences): FLAG — text ignored, sentence identification 0.25" in table
        assert "de (4 sentences): ok — no flag, sentence identification 0.75" in table
        page.set_viewport_size({"width": 1280, "height": 1000})  # the base-language column on screen, not past it
        last = page.locator("#q-table th").filter(has_text="base language").first
        assert last.evaluate("el => el.getBoundingClientRect().right") <= 1280
        note = page.locator("#q-note").inner_text()
        assert "best.pt" in note and "no failure flag" in note and "rose 30% since step 0" in note
        assert "failure flags none · sentence identification (DTW) 1.0 · validation loss 2.5" in note
        page.wait_for_function("() => (document.querySelector('#q-chart .js-plotly-plot') || {}).data?.length >= 5")
        traces = page.evaluate("""() => document.querySelector('#q-chart .js-plotly-plot').data.map(
            t => [t.name, Array.from(t.x), Array.from(t.y)])""")
        assert ["base-language validation loss", [2, 4], [3.1, 3.9]] in traces, traces
        assert ["failure flags raised", [2, 4], [1, 0]] in traces, traces
        for i in range(3):
            page.locator(f"#q-audio-{i}").wait_for(state="visible")
        assert page.locator("#q-audio-0").get_by_text("1. The morning train was late.").count() >= 1
        assert not page.locator("#q-audio-3").is_visible()
