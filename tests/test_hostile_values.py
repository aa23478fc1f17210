"""Generated hostile values (hypothesis, derandomized, a few examples each) into every option of every CLI
command, every parameter of every job kind (the dashboard's door) and every field of the speech server's
request: NUL and control bytes, lone surrogates, NaN and infinity, huge and negative numbers, absolute and
`../` paths, and the wrong types a JSON body or a dashboard field can carry.

What must hold for each: no traceback and no internal error (the CLI exits 0 or 2, a job is queued or refused
with an InputError, the server answers 200 or a 4xx in its JSON error shape), and no file outside the roots
written (a folder `outside/` beside the workspace, which the paths aim at, stays as it was).

The CLI runs in-process through `core.cli.run_parsed` (the code `python -m core` runs) on one parser. The
handlers of the commands that would block or run for minutes when given valid input (`worker`, the
quickstart journeys, `dataset sample`) are not called: their parsing and argument guards are.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from core.cli import build_parser, run_parsed
from core.cli.catalogue import _subparsers, cli_catalogue
from core.errors import InputError
from core.paths import PathType
from tests.serve_helpers import ServerProcess, running_server, write_voice

EXAMPLES = 4  # per option or parameter: ~220 CLI options and ~190 job parameters
HTTP_EXAMPLES = 12  # per request field
NOT_RUN = {("worker",), ("quickstart", "tts"), ("quickstart", "lm"), ("dataset", "sample")}
SECRET = "outside the roots: never written, never copied"
PROFILE = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# ------------------------------------------------------------------ the hostile values

PIECES = ["\x00", "\x01", "\x1b[2J", "\x7f", "\n", "\r\n", "\t", "\udcff", "\ud800", "..", "/", "~", "%s", "{wav}",
          "$(id)", "'", '"', "\\", "\u202e", "é", "ሰላም", "💥", " ", "=", ",", "-", "--x", "*", "?"]
NUMBERS = ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e309", "-1e309", "1e-320", "-1", "-0.0", "0", "2.5", "0.4",
           "99999999999999999999999", "-99999999999999999999", "4294967296", "9223372036854775808", "1_000", "0x10",
           " 7 ", "1e9", "3.0", ""]
PATHS = ["{out}/secret.txt", "{out}", "{out}/new/made.wav", "{out}/secret.txt\x00.wav", "../outside/secret.txt",
         "../outside/new.model", "../../../../../../etc/passwd", "/etc/passwd", "/proc/self/environ", "/dev/null",
         "~/x", "~root/x", ".", "..", "/", "a\x00b", "\udcff.wav", "x" * 300, "../" * 40 + "tmp", "file:///etc/passwd"]

hostile_text = st.one_of(
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), min_size=1, max_size=6).map("".join),
    st.sampled_from(NUMBERS),
    st.sampled_from(PATHS),
    st.integers(min_value=-10**30, max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
# what a dashboard field or a JSON body can carry besides text
hostile_value = st.one_of(
    hostile_text,
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10**30, max_value=10**30),
    st.booleans(),
    st.none(),
    st.lists(hostile_text, max_size=3),
    st.dictionaries(st.sampled_from(["path", "a", "\x00"]), hostile_text, max_size=2),
)


def _fill(value: Any, out: Path) -> Any:
    """Return `value` with `{out}` replaced by the outside folder, in strings and the strings of lists/dicts."""
    if isinstance(value, str):
        return value.replace("{out}", str(out))
    if isinstance(value, list):
        return [_fill(item, out) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, out) for key, item in value.items()}
    return value


# ------------------------------------------------------------------ the sandbox


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(workspace, outside): the workspace is LINGUAFORGE_WORKSPACE and the current folder (so `../outside`
    reaches the outside folder); the outside folder holds a file and a folder the paths aim at."""
    root = tmp_path_factory.mktemp("hostile")
    workspace, outside = root / "workspace", root / "outside"
    workspace.mkdir()
    (outside / "folder").mkdir(parents=True)
    (outside / "secret.txt").write_text(SECRET + "\n", encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
        patch.delenv("LINGUAFORGE_SETTINGS", raising=False)
        patch.delenv("LINGUAFORGE_SERVE_TOKEN", raising=False)
        patch.chdir(workspace)
        yield workspace, outside


def _state(outside: Path) -> dict[str, Any]:
    """What lies outside the workspace as it is: the entries beside it, and every file of the outside folder
    with its content."""
    found: dict[str, Any] = {entry.name: "entry" for entry in outside.parent.iterdir()}
    found.update({str(p.relative_to(outside.parent)): (p.read_bytes() if p.is_file() else "dir") for p in outside.rglob("*")})
    return found


# ------------------------------------------------------------------ every CLI option


def _commands() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    found = {}
    for name, sub in _subparsers(build_parser()).items():
        children = _subparsers(sub)
        found.update({(name, child): parser for child, parser in children.items()} if children else {(name,): sub})
    return found


def _valid(action: argparse.Action, workspace: Path) -> str:
    """Return a benign value for a required argument: a choice, a missing file in the workspace, a number its type takes."""
    if action.choices:
        return str(next(iter(action.choices)))
    if isinstance(action.type, PathType):
        return str(workspace / "missing" / "input.x")
    if callable(action.type):
        for candidate in ("1", "0.95", "x=1", "x"):
            try:
                action.type(candidate)
                return candidate
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                continue
    return "x"


def _words(action: argparse.Action, value: str) -> list[str]:
    if not action.option_strings:
        return [value]
    flag = max(action.option_strings, key=len)
    return [f"{flag}={value}"]  # `=`: a value starting with '-' stays the option's


COMMANDS = _commands()
OPTIONS = [(words, action.dest) for words, parser in COMMANDS.items() for action in parser._actions
           if action.dest not in ("help", "json") and action.nargs != 0]


def _argv(words: tuple[str, ...], dest: str, value: str, workspace: Path) -> list[str]:
    parser = COMMANDS[words]
    argv = list(words)
    for action in parser._actions:
        if action.dest == dest:
            argv += _words(action, value)
        elif action.required or (not action.option_strings and action.nargs != "?" and action.dest not in ("help",)):
            argv += _words(action, _valid(action, workspace))
    return argv


def _run_cli(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[int, str]:
    """Run `argv` as `python -m core` does, in this process; return (exit code, everything printed)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            return int(exc.code or 0), out.getvalue() + err.getvalue()
        if tuple(argv[:2]) in NOT_RUN or tuple(argv[:1]) in NOT_RUN:
            from core.cli._guards import check_arguments

            try:
                check_arguments(args)
                code = 0
            except InputError as exc:
                print(f"error: {exc}", file=err)
                code = 2
        else:
            code = run_parsed(args)
    return code, out.getvalue() + err.getvalue()


@pytest.fixture(scope="module")
def top_parser() -> argparse.ArgumentParser:
    return build_parser()


@pytest.mark.parametrize("words, dest", OPTIONS, ids=[f"{' '.join(w)}:{d}" for w, d in OPTIONS])
@PROFILE
@given(value=hostile_text)
def test_a_hostile_value_in_any_cli_option_is_refused_in_one_line_or_handled(
        sandbox: tuple[Path, Path], top_parser: argparse.ArgumentParser, words: tuple[str, ...], dest: str,
        value: str) -> None:
    workspace, outside = sandbox
    before = _state(outside)
    argv = _argv(words, dest, _fill(value, outside), workspace)
    code, printed = _run_cli(top_parser, argv)
    assert "Traceback" not in printed and "internal error" not in printed, (argv, printed)
    assert code in (0, 2), (argv, code, printed)
    if code == 2:  # one line naming what is wrong (the doctor: its table with the failing check)
        refused = [line for line in printed.splitlines() if line.startswith("error:")]
        assert len(refused) == 1 or (words == ("doctor",) and "FAIL" in printed), (argv, printed)
    assert _state(outside) == before, f"{argv} wrote outside the roots"


def test_every_command_and_option_is_fed() -> None:
    """The table above covers every command of the CLI and, of each, every option that takes a value."""
    assert {words[0] for words in COMMANDS} == set(_subparsers(build_parser()))
    assert len(OPTIONS) >= 200


# ------------------------------------------------------------------ every job parameter (the dashboard's door)


@pytest.fixture(scope="module")
def runner(sandbox: tuple[Path, Path]):
    """A real job runner (SQLite queue) of the sandbox workspace; no worker runs its jobs."""
    from core.config import load_settings
    from jobs.runner import JobRunner

    return JobRunner(load_settings(), catalogue=CATALOGUE)


CATALOGUE = cli_catalogue()


def _job_parameters() -> list[tuple[str, str]]:
    found = []
    for kind in CATALOGUE.kinds():
        _, parser, _ = CATALOGUE.command_parser(kind)
        found += [(kind, action.dest) for action in parser._actions if action.dest not in ("help", "json")]
    return found


JOB_PARAMETERS = _job_parameters()


def _required_params(kind: str, skip: str, workspace: Path) -> dict[str, Any]:
    _, parser, _ = CATALOGUE.command_parser(kind)
    return {action.dest: _valid(action, workspace) for action in parser._actions
            if action.dest not in (skip, "help", "json") and (action.required or not action.option_strings)}


@pytest.mark.parametrize("kind, name", JOB_PARAMETERS, ids=[f"{k}:{n}" for k, n in JOB_PARAMETERS])
@PROFILE
@given(value=hostile_value)
def test_a_hostile_job_parameter_is_refused_or_queued_never_a_crash(sandbox: tuple[Path, Path], runner, kind: str,
                                                                   name: str, value: Any) -> None:
    workspace, outside = sandbox
    before = _state(outside)
    params = {**_required_params(kind, name, workspace), name: _fill(value, outside)}
    try:
        job_id = runner.submit(kind, params)
    except InputError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
    else:  # queued: what it records is what the CLI accepts, every path inside the roots
        assert runner.get_job(job_id)["argv"][0] == kind.split(".")[0]
    assert _state(outside) == before


# ------------------------------------------------------------------ every field of the speech server's request

FIELDS = ["model", "input", "voice", "response_format", "speed", "language", "extra_field"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """The real speech server for a small own-model checkpoint (`tts`), voice `anna`; and the outside folder."""
    from tests.test_inference import _tts_checkpoint

    root = tmp_path_factory.mktemp("hostile-serve")
    workspace, outside = root / "workspace", root / "outside"
    checkpoint = _tts_checkpoint(workspace, 8)
    write_voice(workspace / "voices" / "anna.wav")
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n", encoding="utf-8")
    write_voice(outside / "eve.wav")
    with running_server(workspace, checkpoint, workspace / "voices", root / "serve.log", "--max-input-chars", "40",
                        "--model-name", "tts", "--body-timeout", "2") as proc:
        yield proc, outside


def _json_body(body: dict[str, Any]) -> bytes:
    """The body as JSON text (lone surrogates escaped as JSON allows; NaN and Infinity as Python writes them)."""
    return json.dumps(body).encode("ascii")


@pytest.mark.slow
@pytest.mark.parametrize("field", FIELDS)
@settings(max_examples=HTTP_EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(value=hostile_value)
def test_a_hostile_request_field_gets_200_or_a_4xx_line(server: tuple[ServerProcess, Path], field: str,
                                                       value: Any) -> None:
    proc, outside = server
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    body = {"model": "tts", "input": "The cat sleeps.", "voice": "anna", field: _fill(value, outside)}
    answer = httpx.post(f"{proc.url}/v1/audio/speech", content=_json_body(body),
                        headers={"content-type": "application/json"}, timeout=120)
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, (body, answer.status_code, answer.text)
    if answer.status_code != 200:
        error = answer.json()["error"]
        assert error["message"] and "\n" not in error["message"] and error["type"], answer.text
    assert "Traceback" not in proc.log_text()
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before


@pytest.mark.slow
@settings(max_examples=HTTP_EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(header=st.sampled_from(["authorization", "content-length", "content-type"]), value=hostile_text)
def test_hostile_headers_get_a_json_answer(server: tuple[ServerProcess, Path], header: str, value: str) -> None:
    proc, _ = server
    raw = value.encode("utf-8", "backslashreplace").replace(b"\r", b"").replace(b"\n", b"").replace(b"\x00", b"")
    headers = {b"content-type": b"application/json", header.encode(): raw.strip()}
    body = _json_body({"model": "tts", "input": "hi", "voice": "anna"})
    try:
        answer = httpx.post(f"{proc.url}/v1/audio/speech", content=body, headers=headers, timeout=60)
    except httpx.HTTPError:  # a header httpx itself will not send, or a length the server closes on: no answer to judge
        return
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, (header, value, answer.text)
    assert "Traceback" not in proc.log_text()


def test_the_hostile_values_are_hostile() -> None:
    """The strategies reach what the audit found: NUL, lone surrogates, NaN and infinity, huge numbers, paths out."""
    assert "\x00" in PIECES and "\udcff" in PIECES and "\ud800" in PIECES
    assert {"nan", "inf", "99999999999999999999999", "-1"} <= set(NUMBERS)
    assert any(p.startswith("../") for p in PATHS) and any(p.startswith("/") for p in PATHS)


# ------------------------------------------------------------------ the server's shape for each failure, its stop


@pytest.mark.slow
def test_a_lone_surrogate_is_a_400_line_and_the_server_serves_on(server: tuple[ServerProcess, Path]) -> None:
    """The audit's case: `"hello \\udcff"` was a 500 in plain text with a traceback in the log."""
    proc, _ = server
    for field in ("input", "voice", "model", "language"):
        body = {"model": "tts", "input": "hello", "voice": "anna", field: "hello \udcff"}
        answer = httpx.post(f"{proc.url}/v1/audio/speech", content=_json_body(body),
                            headers={"content-type": "application/json"})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["message"].startswith(f"{field}: not valid UTF-8 text")
    good = httpx.post(f"{proc.url}/v1/audio/speech", json={"model": "tts", "input": "The cat sleeps.", "voice": "anna"},
                      timeout=60)
    assert good.status_code == 200 and "Traceback" not in proc.log_text()


@pytest.mark.slow
def test_a_stalled_body_is_answered_408_within_the_body_timeout(server: tuple[ServerProcess, Path]) -> None:
    """A client that sends its headers and part of its body, then nothing: 408 in the error shape after
    --body-timeout (2 s here), and its connection closed; the server serves on."""
    import socket
    import time

    proc, _ = server
    host, port = proc.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"model\": ")
        start = time.monotonic()
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        waited = time.monotonic() - start
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(body)["error"]["code"] == "body_timeout" and 1.5 < waited < 15, (body, waited)
    good = httpx.post(f"{proc.url}/v1/audio/speech", json={"model": "tts", "input": "The cat sleeps.", "voice": "anna"},
                      timeout=60)
    assert good.status_code == 200


@pytest.mark.slow
def test_waiting_requests_get_503_once_the_server_is_told_to_stop(tmp_path: Path) -> None:
    """SIGTERM while one request is spoken and another waits: the spoken one is answered 200, the waiting one
    503 (`shutting_down`) at once, a new one sent after the signal 503 too (the audit found it refused at the
    connection), as documented, and the server exits 0."""
    import signal
    import threading
    import time

    from tests.test_inference import _tts_checkpoint

    workspace = tmp_path / "workspace"
    checkpoint = _tts_checkpoint(workspace, 200)
    write_voice(workspace / "voices" / "anna.wav")
    answers: dict[str, httpx.Response] = {}

    def ask(name: str, url: str, sentences: int) -> None:
        body = {"model": "tts", "input": " ".join(["The cat sleeps."] * sentences), "voice": "anna"}
        answers[name] = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=300)

    with running_server(workspace, checkpoint, workspace / "voices", tmp_path / "serve.log", "--max-batch", "1",
                        "--max-input-chars", "1000", "--model-name", "tts") as proc:
        spoken = threading.Thread(target=ask, args=("spoken", proc.url, 40))
        spoken.start()
        while httpx.get(f"{proc.url}/health").json()["batches"] < 1:  # the long request is being spoken
            time.sleep(0.05)
        waiting = threading.Thread(target=ask, args=("waiting", proc.url, 1))
        waiting.start()
        while httpx.get(f"{proc.url}/health").json()["waiting"] < 1:
            time.sleep(0.05)
        assert "spoken" not in answers, "the long request ended before the stop; make it longer"
        proc.proc.send_signal(signal.SIGTERM)
        waiting.join(60)
        assert answers["waiting"].status_code == 503, answers["waiting"].text
        assert answers["waiting"].json()["error"]["code"] == "shutting_down"
        ask("new", proc.url, 1)  # a new connection after the signal: answered 503, not refused at the connection
        assert answers["new"].status_code == 503 and answers["new"].json()["error"]["code"] == "shutting_down"
        assert "spoken" not in answers  # refused while the batch was still spoken
        spoken.join(300)
        assert answers["spoken"].status_code == 200 and answers["spoken"].content[:4] == b"RIFF"
        assert proc.proc.wait(60) == 0 and "Traceback" not in proc.log_text()


# ------------------------------------------------------------------ every value that becomes part of a path


def _name_options() -> list[tuple[tuple[str, ...], str]]:
    """Every CLI option whose value becomes part of a file or folder name (typed by `name_arg` / `name_list`)."""
    return [(words, action.dest) for words, parser in COMMANDS.items() for action in parser._actions
            if getattr(action.type, "__name__", "") in ("name", "list of names")]


NAME_OPTIONS = _name_options()


def test_every_value_that_becomes_part_of_a_path_is_typed_as_a_name() -> None:
    """The language codes, export and run names (the audit's `--base-language ../../…` and `qs\\n`) are found."""
    dests = {(words, dest) for words, dest in NAME_OPTIONS}
    assert {(("eval", "tts"), "base_language"), (("eval", "tts"), "language"), (("dataset", "sample"), "languages"),
            (("quickstart", "tts"), "name"), (("export",), "name"), (("synthesize",), "language")} <= dests


@pytest.mark.parametrize("words, dest", NAME_OPTIONS, ids=[f"{' '.join(w)}:{d}" for w, d in NAME_OPTIONS])
@PROFILE
@given(value=hostile_text)
def test_a_name_option_takes_exactly_the_names(words: tuple[str, ...], dest: str, value: str) -> None:
    """Each such option accepts a value exactly when every item is one name by the one name rule (anchored at
    the end: no final newline, no separator, no `..`, no control character)."""
    from core.cli.common import csv_list
    from core.confine import is_name

    action = next(a for a in COMMANDS[words]._actions if a.dest == dest)
    items = csv_list(value) if action.type.__name__ == "list of names" else [value]
    try:
        action.type(value)
        accepted = True
    except argparse.ArgumentTypeError as exc:
        accepted = False
        assert "\n" not in str(exc) and "not a name" in str(exc)
    assert accepted == all(is_name(item) for item in items), (value, accepted)


# ------------------------------------------------------------------ every structured reader: nesting, ids, counts

json_leaf = st.one_of(st.integers(min_value=-10**30, max_value=10**30), st.text(max_size=4), st.booleans(), st.none())


@st.composite
def nested_text(draw: st.DrawFn) -> tuple[str, int]:
    """(JSON text, depth): a value wrapped in `depth` arrays or objects, depth up to 5,000, brackets inside
    strings among them."""
    depth = draw(st.one_of(st.integers(0, 120), st.integers(120, 5000)))
    kinds = draw(st.lists(st.sampled_from([("[", "]"), ('{"k[": ', "}"), ('["]{[", ', "]")]), min_size=1, max_size=3))
    levels = [kinds[i % len(kinds)] for i in range(depth)]
    text = "".join(o for o, _ in levels) + json.dumps(draw(json_leaf)) + "".join(c for _, c in reversed(levels))
    return text, depth


@settings(max_examples=40, derandomize=True, deadline=None, database=None)
@given(case=nested_text())
def test_the_bounded_readers_take_any_nesting_without_a_crash(case: tuple[str, int]) -> None:
    """JSON and YAML (flow) text nested to any depth: the value when within MAX_DEPTH, else one StructureError
    line naming the depth; never a RecursionError."""
    from core.structured import MAX_DEPTH, StructureError, loads_json, loads_yaml, nesting_depth

    text, depth = case
    assert nesting_depth(text.encode()) == depth
    for loads in (loads_json, loads_yaml):
        try:
            value = loads(text, "generated")
        except StructureError as exc:
            assert depth > MAX_DEPTH and "\n" not in str(exc) and f"nested {depth:,} levels" in str(exc)
        else:
            assert depth <= MAX_DEPTH and value == json.loads(text)


@st.composite
def forged_tokenizer(draw: st.DrawFn) -> dict[str, Any]:
    """A WordLevel tokenizer.json whose ids may hold huge values, gaps or repeats, with up to 300 entries."""
    count = draw(st.integers(1, 300))
    ids = list(range(count))
    for _ in range(draw(st.integers(0, 3))):
        ids[draw(st.integers(0, count - 1))] = draw(st.one_of(st.integers(0, 2 * count),
                                                              st.integers(2**31, 2**32 - 1)))
    vocab = {f"w{i}": token_id for i, token_id in enumerate(ids)} | {"[UNK]": count}
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": None, "decoder": None, "truncation": None, "padding": None,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}


@settings(max_examples=25, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=forged_tokenizer())
def test_a_tokenizer_is_never_sized_beyond_its_own_entries(tmp_path: Path, spec: dict[str, Any]) -> None:
    """Whatever ids a tokenizer.json holds, a loaded tokenizer's size is its entries' count (ids 0..n-1), else
    one line naming the id beyond it."""
    from core.tokenizers.tokenizer import load_tokenizer

    path = tmp_path / "forged.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    ids = set(spec["model"]["vocab"].values())
    try:
        tokenizer = load_tokenizer(path)
    except InputError as exc:
        assert "\n" not in str(exc) and (max(ids) >= len(ids) or "not a loadable" in str(exc)), str(exc)
    else:
        assert tokenizer.size == len(ids) == max(ids) + 1


# ------------------------------------------------------------------ every upload: member lists generated


member_name = st.one_of(
    st.lists(st.one_of(st.sampled_from(["a", "b", "x.wav", "..", ".h", "", "d" * 250, "é", "\x01", " "]),
                       st.text(max_size=5)), min_size=1, max_size=4).map("/".join),
    st.sampled_from(["/abs.wav", "C:\\win.wav", "a\\b.wav", "../up.wav", "x.wav", "x.wav/y.wav", "clip.wav\n",
                     "ok/clip.wav", "table.csv", "a.exe"]),
)


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(members=st.lists(st.tuples(member_name, st.binary(max_size=64)), min_size=1, max_size=8))
@example(members=[("ok/clip.wav", b"RIFF"), ("table.csv", b"a,b"), ("ok/deeper/b.wav", b"")])  # one that is stored
def test_an_upload_writes_exactly_its_members_or_nothing(tmp_path_factory: pytest.TempPathFactory,
                                                         members: list[tuple[str, bytes]]) -> None:
    """A zip of generated members: either every member lands under uploads/<name>/ with its bytes, or one
    InputError line and nothing at all is left in the workspace; nothing outside it is touched."""
    import warnings
    import zipfile

    from core.config import Settings
    from core.uploads import DATASET, store_upload

    root = tmp_path_factory.mktemp("upload")
    workspace, outside = root / "workspace", root / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET, encoding="utf-8")
    source = root / "members.zip"
    with zipfile.ZipFile(source, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a repeated member name: the case is meant
        for name, data in members:
            archive.writestr(zipfile.ZipInfo(name or "empty"), data)
    try:
        written = store_upload(Settings(workspace=workspace), DATASET, [source], "generated")
    except InputError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        assert not any(p.is_file() for p in workspace.rglob("*")), list(workspace.rglob("*"))
    else:
        with zipfile.ZipFile(source) as archive:
            expected = {info.filename: archive.read(info) for info in archive.infolist() if not info.is_dir()}
        folder = workspace / "uploads" / "generated"
        assert {p.relative_to(folder).as_posix(): p.read_bytes() for p in written} == expected
        assert sorted(p for p in workspace.rglob("*") if p.is_file()) == sorted(written)
    assert {p.name: p.read_text(encoding="utf-8") for p in outside.iterdir()} == {"secret.txt": SECRET}
