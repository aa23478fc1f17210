"""Helpers every tab uses: the shared context, error-to-message wrapping, workspace path checks."""

from __future__ import annotations

import functools
import inspect
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import gradio as gr

from core.config import Settings, read_yaml
from core.errors import InputError, LinguaForgeError
from core.progress import format_seconds
from core.runs import RunFolder, progress_view
from core.uploads import UploadKind, store_upload
from core.workspace_files import CHECKPOINTS, CORPORA, find_files, newest_file
from gradio_app.charts import loss_weights
from gradio_app.runner import JobRunner, job_states, kind_words

LOG = logging.getLogger("linguaforge.ui")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class UIContext:
    """What every tab needs: the settings (workspace, roots), the job runner, the TensorBoard path."""

    settings: Settings
    runner: JobRunner
    tensorboard_path: str = "/tensorboard/"


CLI_HELP = re.compile(r"\s*Run `python -m core [^`]*--help`\.?")
CLI_VALUE = r"(?:<[^>]*>|“[^”]*”|[^\s`”\"<(-][^\s`”\"]*?(?=[.,;]?(?:\s|$|`)))"
CLI_COMMAND = re.compile(rf"`python -m core ([a-z]+(?: [a-z]+)?)[^`]*`|[“\"]?python -m core ([a-z]+(?: [a-z]+)?)"
                         rf"(?:\s+--[a-z-]+(?:\s+{CLI_VALUE})?|\s+“[^”]*”)*[”\"]?")
COMMAND_TABS = {  # a CLI command a message points to → where the dashboard does it
    "embeddings extend": "the Embeddings tab", "tokenizer train": "the Tokenizer tab",
    "tokenizer extend": "the Tokenizer tab", "tokenizer merge": "the Tokenizer tab", "jobs logs": "the Jobs tab",
    "train": "the Training tab", "prune": "the Export tab", "export": "the Export tab", "synthesize": "the Inference tab",
}
CLI_FLAG = re.compile(r"--([a-z0-9][a-z0-9-]*)")


def where_done(command: str) -> str:
    """Return where the dashboard does CLI `command` (its first two words): a tab from COMMAND_TABS."""
    return COMMAND_TABS.get(command, COMMAND_TABS.get(command.split()[0], "this dashboard"))


def form_message(text: str, labels: dict[str, str] | None = None) -> str:
    """Return an error message in the dashboard's words: `--flag` becomes the field's label (from `labels`,
    keyed by parameter name), the CLI's `Run python -m core … --help` hint is dropped, and a command a
    message points to (`python -m core embeddings extend …`) becomes the tab that does it (COMMAND_TABS)."""
    labels = labels or {}
    text = CLI_HELP.sub("", text)
    text = CLI_COMMAND.sub(lambda m: where_done(m.group(1) or m.group(2)), text)
    text = text.replace("the following arguments are required:", "fill in")

    def label(match: re.Match[str]) -> str:
        key = match.group(1).replace("-", "_")
        return f"“{labels.get(key, key.replace('_', ' '))}”"

    return CLI_FLAG.sub(label, text).strip()


CODE_SPAN = re.compile(r"`([^`]+)`")
# `base_size`; not a file name (`en_am.model`) nor a part of a dotted run-config key (`model.text_tokens_dict_size`)
SNAKE_KEY = re.compile(r"(?<![.\w])[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b(?![.\w])")
INIT_WORDS = {  # `embeddings extend --init` → what the dashboard offers (core.tokenizers.vocab.INIT_METHODS)
    "fvt": "from the pieces it splits into (recommended)", "translit": "from its romanized spelling",
    "mean": "the mean of the base rows", "normal": "random, spread like the base rows",
}


def plain_text(text: str, settings: Settings | None = None, labels: dict[str, str] | None = None) -> str:
    """Return a message in the dashboard's words for a place that shows text as it is (a table cell): `form_message`
    (with the form's `labels`), then code spans as quotes (“mean”), keys with underscores as words (base size) and,
    with `settings`, paths inside the workspace relative to it."""
    text = form_message(text, labels)
    if settings is not None:
        text = text.replace(f"{settings.workspace}/", "").replace(str(settings.workspace), "the workspace")
    text = CODE_SPAN.sub(lambda m: f"“{m.group(1)}”", text)
    return SNAKE_KEY.sub(lambda m: m.group(0).replace("_", " "), text)


def init_choices() -> list[tuple[str, str]]:
    """Return the (words, method) choices of how the new embedding rows start, in INIT_WORDS' order."""
    return [(words, method) for method, words in INIT_WORDS.items()]


def error_text(exc: Exception, labels: dict[str, str] | None = None) -> str:
    """Return the one-line Markdown shown next to an action that raised `exc` (logged when unexpected)."""
    if isinstance(exc, LinguaForgeError):
        message = str(exc)
    else:
        LOG.error("dashboard handler failed", exc_info=exc)
        message = f"internal error: {exc} (details in the server log)"
    return f"**Error:** {escape_markdown(form_message(message, labels))}"


def ui_action(outputs: int = 1, message: int = 0, labels: dict[str, str] | None = None) -> Callable[[F], F]:
    """Return a decorator for a Gradio handler with `outputs` output components.

    When the handler raises, the output at position `message` (a Markdown next to the action's
    button) shows the error in the dashboard's words (see `form_message`) and every other output is
    left untouched, so no other component shows an error badge. Generators yield the same.
    """

    def failed(exc: Exception) -> Any:
        updates = [gr.update() for _ in range(outputs)]
        updates[message] = gr.update(value=error_text(exc, labels), visible=True)
        return updates[0] if outputs == 1 else tuple(updates)

    def decorate(fn: F) -> F:
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
                try:
                    yield from fn(*args, **kwargs)
                except Exception as exc:  # the UI edge: a message, never a stack trace
                    yield failed(exc)

            return generator  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # the UI edge: a message, never a stack trace
                return failed(exc)

        return wrapper  # type: ignore[return-value]

    return decorate


def require_text(value: str | None, message: str) -> str:
    """Return `value` stripped; raise InputError(`message`) (e.g. "Enter the text to speak.") when it is empty."""
    text = (value or "").strip()
    if not text:
        raise InputError(message)
    return text


def escape_markdown(text: str) -> str:
    """Return `text` with the characters Markdown reads as emphasis or markup (`_ * [ ] < >`) escaped outside
    `code spans`, so a name like `my_run_2` keeps its underscores instead of turning into italics."""
    pieces = re.split(r"(`[^`]*`)", text)
    return "".join(piece if piece.startswith("`") and piece.endswith("`") and len(piece) > 1
                   else re.sub(r"([\\*_\[\]<>])", r"\\\1", piece) for piece in pieces)


def job_line(job: dict[str, Any], with_progress: bool = True) -> str:
    """Return a one-line Markdown status of a job: its kind in words, id, status, what it waits for (while queued),
    that it is stopping (running after a stop was asked), progress and time so far (while running, unless
    `with_progress` is False because a progress box beside it shows it), the error it ended with."""
    parts = [f"{kind_words(job.get('kind'), start=True)} job `{job['id']}`: **{job['status']}**"]
    if job.get("waits_for"):
        parts.append(f"— {escape_markdown(job['waits_for'])}")
    if job.get("status") == job_states.RUNNING and job.get("cancel_requested"):
        parts.append("— stopping: it saves a checkpoint, then exits" if job.get("kind") == "train" else "— stopping")
    view = progress_view(job.get("progress"), job_status=job["status"])
    if with_progress and job.get("status") == job_states.RUNNING:
        if view.fraction is not None:
            parts.append(view.text())
        elapsed = job_duration(job)
        if elapsed is not None:
            parts.append(f"· running for {format_seconds(elapsed)}")
    if job.get("error") and job.get("status") not in job_states.IN_PROGRESS:  # not a resumed job's last error
        parts.append(f"— {escape_markdown(form_message(job['error']))}")
    return " ".join(parts)


def request_message(asked: str, job: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """Return the line a Stop, Cancel or Resume click leaves beside its button — what was asked, then the job's
    state now (`job_line` of its record `job`) — and what the page's timer follows to keep that line current
    (`follow_request`): None once the job has ended, as its line changes no more."""
    line = f"{asked} requested. {job_line(job, with_progress=False)}"
    return line, (None if job["status"] in job_states.FINAL else {"asked": asked, "job": job["id"], "line": line})


def follow_request(runner: JobRunner, followed: dict[str, Any] | None, shown: str | None) -> tuple[Any, Any]:
    """Return (the message, what is followed next) for a page's timer: the request line of `followed` (from
    `request_message`) drawn again from its job's record while the message `shown` is the line last drawn, so it
    never outlives the job. A message that shows anything else — an error or another action's words, or the click's
    own line not yet on the page when the tick was sent — is left as it is; nothing is followed once the record is
    gone."""
    if not followed or (shown or "").strip() != followed["line"]:
        return gr.update(), followed
    try:
        job = runner.get(followed["job"])
    except InputError:
        return gr.update(), None
    return request_message(followed["asked"], job)


@dataclass(frozen=True)
class LiveTimer:
    """The timer that keeps a tab's live parts current (its progress, charts, request line), ticking only while
    `tab` is the one in view: each tick is an event every open page pays for, seen or not (Gradio updates every
    component's loading status on each of its status messages), so a tab has one tick handler, sent off the queue
    (one response instead of a queue's several messages). `first_reading`, when given, is the page-load event
    after which the timer starts if its tab is then in view (the timer is created inactive)."""

    tab: gr.Tab
    timer: gr.Timer
    first_reading: Any = None  # a Gradio event dependency (`demo.load(...)`), or None


TIMERS_IN_VIEW = "timers-in-view"  # one at a time, in order: a tab switch and a timer's first start never cross


def run_timers_in_view(tabs: gr.Tabs, live: list[LiveTimer], opened_on: str) -> None:
    """Start the timer of the tab a person selects in `tabs` and stop every other one of `live`; a timer with a
    `first_reading` starts after it only when its tab is still in view. `opened_on` is the label of the tab a
    page opens on. The switches and the first starts run one at a time in the order they were sent, so a start
    sent before a switch is undone by it, and one sent after it sees it."""
    if not live:
        return
    in_view = gr.State(opened_on)
    serial = {"concurrency_id": TIMERS_IN_VIEW, "concurrency_limit": 1, "show_progress": "hidden"}

    def select(evt: gr.SelectData) -> list[Any]:
        return [*(gr.Timer(active=evt.value == item.tab.label) for item in live), evt.value]

    tabs.select(select, None, [*(item.timer for item in live), in_view], **serial)
    for item in live:
        if item.first_reading is not None:
            item.first_reading.then(lambda label, tab=item.tab.label: gr.Timer(active=label == tab), in_view,
                                    item.timer, **serial)


def follow_job(runner: JobRunner, job_id: str, poll: float = 1.0) -> Iterator[dict[str, Any]]:
    """Yield the job's record every `poll` seconds until it reaches a final status (the last one yielded)."""
    while True:
        job = runner.get(job_id)
        yield job
        if job["status"] in job_states.FINAL:
            return
        time.sleep(poll)


def require_success(job: dict[str, Any]) -> dict[str, Any]:
    """Return the job's artifacts (its command's JSON output) when it succeeded; raise InputError otherwise."""
    if job["status"] != job_states.SUCCEEDED:
        raise InputError(f"{kind_words(job.get('kind'))} job {job['id']} {job['status']}: "
                         f"{(job.get('error') or 'no message').rstrip('.')}. Its log is in the Jobs tab.")
    return job.get("artifacts") or {}


def paths_param(settings: Settings, value: str | list[str] | None, what: str) -> list[str]:
    """Return the paths of a form field (a multiselect's list, or comma-separated text), each checked inside
    the workspace and existing."""
    values = value if isinstance(value, list) else (value or "").split(",")
    items = [str(item).strip() for item in values if str(item).strip()]
    if not items:
        raise InputError(f"{what}: empty. Give one or more paths inside the workspace, separated by commas.")
    return [str(inside_workspace(settings, item, what)) for item in items]


def output_param(settings: Settings, value: str | None, what: str) -> str:
    """Return an output path typed in a form, resolved inside the workspace (it need not exist)."""
    return str(inside_workspace(settings, value, what, must_exist=False))


def inside_workspace(settings: Settings, value: str | None, what: str, must_exist: bool = True) -> Path:
    """Return the form value `value` resolved inside the workspace or a configured data root.

    Raises InputError when it is empty, lies outside the allowed folders, or (with
    `must_exist`) does not exist.
    """
    text = (value or "").strip()
    if not text:
        raise InputError(f"{what}: empty. Type a path inside the workspace ({settings.workspace}).")
    path = settings.check_inside_roots(text)
    if must_exist and not path.exists():
        raise InputError(f"{what}: {path} does not exist. Check the path (relative paths start at the workspace).")
    return path


def relative(settings: Settings, path: Path | str) -> str:
    """Return `path` relative to the workspace when it lies inside it, else as an absolute string.

    A relative `path` is a dashboard value, so it resolves against the workspace (the path rule).
    """
    resolved = settings.resolve(path)
    try:
        return str(resolved.relative_to(settings.workspace))
    except ValueError:
        return str(resolved)


def job_duration(job: dict[str, Any]) -> float | None:
    """Return how long a job has run (until now while running), or None before it started."""
    started = job.get("started_at")
    if not started:
        return None
    return (job.get("finished_at") or time.time()) - started


def run_loss_weights(run_dir: Path) -> dict[str, float]:
    """Return the `loss:` weights of the run in `run_dir` (its config.yaml; {} when it has none or it is unreadable)."""
    config = RunFolder(run_dir).config
    try:
        return loss_weights(read_yaml(config)) if config.is_file() else {}
    except InputError:
        return {}


def checkpoint_choices(settings: Settings, current: str | None) -> Any:
    """Return the update that lists the workspace's checkpoints again, keeping `current` while the list holds it,
    else choosing the newest (what a tab that opens on a checkpoint shows)."""
    listed = find_files(settings, CHECKPOINTS)
    return gr.update(choices=listed, value=current if current in listed else newest_file(settings, CHECKPOINTS))


def corpus_field(settings: Settings, label: str, elem_id: str | None = None, value: list[str] | None = None) -> gr.Dropdown:
    """Return a field that picks text corpora: a multiselect of the workspace's text files (`CORPORA`), which also
    takes a typed path inside the roots."""
    return gr.Dropdown(find_files(settings, CORPORA), value=value or [], multiselect=True, allow_custom_value=True,
                       label=label, elem_id=elem_id)


def upload_into(settings: Settings, kind: UploadKind, files: Any, name: str | None = None) -> list[str]:
    """Store uploaded `files` (one path or a list, from a gr.File or gr.UploadButton) as `kind` (`core.uploads`) and
    return the written files relative to the workspace."""
    paths = files if isinstance(files, list) else [files] if files else []
    return [relative(settings, path) for path in store_upload(settings, kind, paths, name)]


def long_action(button: gr.Button, fn: Callable[..., Any], inputs: Any, outputs: Any) -> Any:
    """Wire `button` to the handler `fn` of a long action (a job it follows): the button is disabled the moment it
    is clicked, so a second click cannot queue the same work again, and enabled once `fn` ended, however it
    ended. Return the last event, for a `.then` after it."""
    return (button.click(lambda: gr.update(interactive=False), None, button, queue=False, show_progress="hidden")
            .then(fn, inputs, outputs)
            .then(lambda: gr.update(interactive=True), None, button, show_progress="hidden"))
