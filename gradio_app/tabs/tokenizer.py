"""Tokenizer tab: train, extend, merge and sweep as jobs; the inspect report as tables and a plot."""

from __future__ import annotations

from typing import Any, Iterator

import gradio as gr
import plotly.graph_objects as go

from core.numbers import MAX_VOCAB, NumberRange
from core.tokenizers.corpus import read_corpus_lines
from core.tokenizers.report import inspect_tokenizer
from core.tokenizers.sp_extend import check_target_size
from core.uploads import CORPUS
from core.workspace_files import CORPORA, HF_TOKENIZERS, SENTENCEPIECE_TOKENIZERS, TOKENIZERS, find_files
from gradio_app.charts import bar_figure, plot, sweep_figure
from gradio_app.common import (
    UIContext,
    long_action,
    corpus_field,
    upload_into,
    follow_job,
    inside_workspace,
    job_line,
    output_param,
    paths_param,
    require_success,
    ui_action,
)
from gradio_app.style import PATH_FIELD

LABELS = {"corpus": "Corpus files", "vocab_size": "Vocabulary size", "output": "Output", "base": "Base tokenizer",
          "target_size": "Target size", "protect_corpus": "Protect corpus", "sizes": "Sizes",
          "character_coverage": "Character coverage", "add": "tokenizer.json to add", "language_tag": "Language tag"}
BASE_SIZE = NumberRange(0, MAX_VOCAB, integer=True)
SWEEP_HEADERS = ["size", "chars/token", "bytes/token", "unused share", "note"]


TOKEN_SHARE_TITLE = "Where the corpus's tokens come from"
ID_SHARE_TITLE = "How much of the vocabulary the corpus uses"


def report_tables(report: dict[str, Any]) -> tuple[list[list[Any]], list[list[Any]], go.Figure]:
    """Return (summary rows, unknown-character rows, chart) for an inspect report. The chart: for an extended
    tokenizer the share of the corpus's tokens from base and from new ids, else the share of the vocabulary's
    ids the corpus uses and never uses."""
    size = int(report["size"])
    summary: list[list[Any]] = [["kind", report["kind"]], ["size", size], ["fingerprint", report["fingerprint"]],
                                ["special ids", ", ".join(f"{name} {'none' if value is None else value}" for name, value
                                                          in (report.get("special_ids") or {}).items()) or "none"]]
    base = report.get("base_size")
    ranges = [["base ids", f"0–{(base or size) - 1}"]]
    if base is not None and base < size:
        ranges.append(["new ids", f"{base}–{size - 1}"])
    summary += ranges
    stats = report.get("corpus")
    if not stats:
        return summary, [], bar_figure([], [], ID_SHARE_TITLE, "", "")
    summary += [
        ["corpus lines / tokens", f"{stats['lines']} / {stats['tokens']}"],
        ["unknown-piece rate", f"{stats['unk_rate']:.2%}"],
        ["characters per token", f"{stats['chars_per_token']:.3f}"],
        ["bytes per token", f"{stats['bytes_per_token']:.3f}"],
        ["vocabulary never used", f"{stats['unused_share']:.1%} ({size - stats['ids_used']} of {size} ids)"],
    ]
    unknown = [[u["char"], u["codepoint"], u["count"]] for u in stats.get("unknown_characters") or []]
    if "share_at_or_above_base" in stats:
        summary.append(["added pieces used", f"{stats['added_pieces_used']} of {stats['added_pieces']}"])
        share = float(stats["share_at_or_above_base"])
        chart = bar_figure(["base ids", "new ids"], [1.0 - share, share], TOKEN_SHARE_TITLE, "", "share of the tokens",
                           percent=True)
    else:
        unused = float(stats["unused_share"])
        chart = bar_figure(["ids used", "ids never used"], [1.0 - unused, unused], ID_SHARE_TITLE, "",
                           "share of the ids", percent=True)
    return summary, unknown, chart


def build(ctx: UIContext, demo: gr.Blocks) -> None:
    """Lay out the Tokenizer tab."""
    settings, runner = ctx.settings, ctx.runner

    def run(kind: str, params: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        job_id = runner.submit(kind, params)
        for job in follow_job(runner, job_id):
            yield job_line(job), gr.update()
        artifacts = require_success(job)
        yield job_line(job) + f" → `{artifacts.get('output', '')}`", gr.update(
            choices=find_files(settings, TOKENIZERS))

    @ui_action(outputs=2, labels=LABELS)
    def train(corpus: list[str], kind: str, vocab_size: float, model_type: str, coverage: float, output: str):
        yield from run("tokenizer.train", {
            "corpus": paths_param(settings, corpus, "corpus"), "kind": kind, "vocab_size": vocab_size,
            "model_type": model_type, "character_coverage": coverage, "output": output_param(settings, output, "output")})

    @ui_action(outputs=2, labels=LABELS)
    def extend(base: str, corpus: list[str], target: float, protect: list[str], coverage: float, output: str):
        base_path, corpus_paths = inside_workspace(settings, base, "base tokenizer"), paths_param(settings, corpus, "corpus")
        if target:  # the size check needs no work: refused here, before a job waits in the queue to fail on it
            check_target_size(base_path, read_corpus_lines(corpus_paths), int(target), coverage or 1.0)
        yield from run("tokenizer.extend", {
            "base": str(base_path), "corpus": corpus_paths, "target_size": target,
            "protect_corpus": paths_param(settings, protect, "protect corpus") if protect else None,
            "character_coverage": coverage, "output": output_param(settings, output, "output")})

    @ui_action(outputs=2, labels=LABELS)
    def merge(base: str, add: str | None, corpus: list[str], vocab_size: float, tag: str, output: str):
        yield from run("tokenizer.merge", {
            "base": str(inside_workspace(settings, base, "base tokenizer")),
            "add": str(inside_workspace(settings, add, "tokenizer to add")) if (add or "").strip() else None,
            "corpus": paths_param(settings, corpus, "corpus") if corpus else None,
            "vocab_size": vocab_size, "language_tag": tag.strip() or None,
            "output": output_param(settings, output, "output")})

    @ui_action(outputs=3, labels=LABELS)
    def sweep(corpus: list[str], sizes: str, kind: str, model_type: str):
        job_id = runner.submit("tokenizer.sweep", {"corpus": paths_param(settings, corpus, "corpus"),
                                                   "sizes": sizes, "kind": kind, "model_type": model_type})
        for job in follow_job(runner, job_id):
            yield job_line(job), gr.update(), gr.update()
        result = require_success(job)
        rows = [[r["size"], round(r["chars_per_token"], 3), round(r["bytes_per_token"], 3),
                 round(r["unused_share"], 3), ""] if r.get("error") is None else [r["size"], None, None, None, r["error"]]
                for r in result.get("rows", [])]
        yield (job_line(job) + f" — recommended **{result.get('recommended')}**: {result.get('reason', '')}", rows,
               sweep_figure(result.get("rows", [])))

    @ui_action(outputs=4, labels=LABELS)
    def inspect(tokenizer: str, corpus: list[str], base_size: float | None):
        path = inside_workspace(settings, tokenizer, "Tokenizer")
        lines = read_corpus_lines(paths_param(settings, corpus, "Corpus"), check_variety=False) if corpus else None
        base = BASE_SIZE.check(base_size, "Base size") if base_size else None  # empty (the browser sends 0): no base
        return ("", *report_tables(inspect_tokenizer(path, lines, base)))

    kinds = ["sentencepiece", "hf-bpe"]
    with gr.Tab("Tokenizer", id="tokenizer") as tab:
        with gr.Row():
            gr.Markdown("Corpora are picked from the workspace's text files; upload one to add it (kept in corpora/).")
            upload = gr.UploadButton("Upload a text corpus (.txt)", file_types=[".txt"], file_count="multiple",
                                     size="sm", elem_id="tok-upload")
        upload_status = gr.Markdown(elem_id="tok-upload-status")
        with gr.Tab("Train"):
            with gr.Row():
                t_corpus = corpus_field(settings, "Corpus files", "tok-train-corpus")
                t_output = gr.Textbox(label="Output", value="tokenizers/new.model", elem_id="tok-train-output")
            with gr.Row():
                t_kind = gr.Dropdown(kinds, value="sentencepiece", label="Kind")
                t_size = gr.Number(1000, label="Vocabulary size", precision=0, elem_id="tok-train-size")
                t_model = gr.Dropdown(["bpe", "unigram"], value="bpe", label="Model type")
                t_cov = gr.Number(1.0, label="Character coverage")
            t_btn = gr.Button("Train tokenizer", variant="primary", elem_id="tok-train-btn")
            t_status = gr.Markdown(elem_id="tok-status")
        with gr.Tab("Extend"):
            with gr.Row():
                e_base = gr.Dropdown(find_files(settings, SENTENCEPIECE_TOKENIZERS), label="Base tokenizer",
                                     allow_custom_value=True, elem_id="tok-extend-base", elem_classes=[PATH_FIELD])
                e_corpus = corpus_field(settings, "New-language corpus", "tok-extend-corpus")
                e_protect = corpus_field(settings, "Protect corpus (base language, optional)", "tok-extend-protect")
            with gr.Row():
                e_target = gr.Number(2000, label="Target size", precision=0)
                e_cov = gr.Number(1.0, label="Character coverage")
                e_output = gr.Textbox(label="Output", value="tokenizers/extended.model")
            e_btn = gr.Button("Extend tokenizer", variant="primary", elem_id="tok-extend-btn")
            e_status = gr.Markdown(elem_id="tok-extend-status")
        with gr.Tab("Merge (HF)"):
            with gr.Row():
                m_base = gr.Dropdown(find_files(settings, HF_TOKENIZERS), label="Base tokenizer.json",
                                     allow_custom_value=True, elem_id="tok-merge-base")
                m_add = gr.Dropdown(find_files(settings, HF_TOKENIZERS), value=None, allow_custom_value=True,
                                    label="tokenizer.json to add (or train one on a corpus)", elem_id="tok-merge-add")
                m_corpus = corpus_field(settings, "Corpus to train the addition on", "tok-merge-corpus")
            with gr.Row():
                m_size = gr.Number(None, label="Addition size (with corpus)", precision=0)
                m_tag = gr.Textbox(label="Language tag", placeholder="am")
                m_output = gr.Textbox(label="Output", value="tokenizers/merged.json")
            m_btn = gr.Button("Merge", variant="primary")
            m_status = gr.Markdown(elem_id="tok-merge-status")
        with gr.Tab("Sweep"):
            with gr.Row():
                s_corpus = corpus_field(settings, "Corpus files", "tok-sweep-corpus")
                s_sizes = gr.Textbox(label="Sizes", value="500,1000,2000")
                s_kind = gr.Dropdown(kinds, value="sentencepiece", label="Kind")
                s_model = gr.Dropdown(["bpe", "unigram"], value="bpe", label="Model type")
            s_btn = gr.Button("Sweep", variant="primary")
            s_status = gr.Markdown(elem_id="tok-sweep-status")
            s_table = gr.Dataframe(headers=SWEEP_HEADERS, value=[], interactive=False)
            s_plot = plot("tok-sweep-plot", sweep_figure([]))
        gr.Markdown("### Inspect")
        with gr.Row():
            i_tok = gr.Dropdown(find_files(settings, TOKENIZERS), label="Tokenizer", allow_custom_value=True,
                                elem_id="tok-inspect-tokenizer", elem_classes=[PATH_FIELD])
            i_corpus = corpus_field(settings, "Corpus (optional)", "tok-inspect-corpus")
            i_base = gr.Number(None, label="Base size (optional)", precision=0)
            i_btn = gr.Button("Inspect", elem_id="tok-inspect-btn")
        i_status = gr.Markdown(elem_id="tok-inspect-status")
        with gr.Row():
            i_summary = gr.Dataframe(headers=["property", "value"], value=[], interactive=False, wrap=True,
                                     column_widths=["45%", "55%"], elem_id="tok-report")
            i_unknown = gr.Dataframe(headers=["unknown character", "codepoint", "count"], value=[], interactive=False)
            i_plot = plot("tok-inspect-plot", bar_figure([], [], ID_SHARE_TITLE, "", ""))

    long_action(t_btn, train, [t_corpus, t_kind, t_size, t_model, t_cov, t_output], [t_status, i_tok])
    long_action(e_btn, extend, [e_base, e_corpus, e_target, e_protect, e_cov, e_output], [e_status, i_tok])
    long_action(m_btn, merge, [m_base, m_add, m_corpus, m_size, m_tag, m_output], [m_status, i_tok])
    long_action(s_btn, sweep, [s_corpus, s_sizes, s_kind, s_model], [s_status, s_table, s_plot])
    i_btn.click(inspect, [i_tok, i_corpus, i_base], [i_status, i_summary, i_unknown, i_plot])

    corpora = [t_corpus, e_corpus, e_protect, m_corpus, s_corpus, i_corpus]

    def refresh() -> tuple[Any, ...]:
        texts = find_files(settings, CORPORA)
        return (gr.update(choices=find_files(settings, TOKENIZERS)),
                gr.update(choices=find_files(settings, SENTENCEPIECE_TOKENIZERS)),
                gr.update(choices=find_files(settings, HF_TOKENIZERS)), gr.update(choices=find_files(settings, HF_TOKENIZERS)),
                *(gr.update(choices=texts) for _ in corpora))

    @ui_action(outputs=1 + len(corpora))
    def uploaded(files: Any) -> tuple[Any, ...]:
        written = upload_into(settings, CORPUS, files)
        texts = find_files(settings, CORPORA)
        return (f"Uploaded {', '.join(f'`{p}`' for p in written)}; pick it in a corpus field.",
                *(gr.update(choices=texts) for _ in corpora))

    upload.upload(uploaded, upload, [upload_status, *corpora])
    tab.select(refresh, None, [i_tok, e_base, m_base, m_add, *corpora], show_progress="hidden")
