"""The dashboard's HTTP API as a hostile client sees it: the real app.py with --auth on a free port.

Checks: file parameters of every endpoint are uploads of this server or workspace paths; a visitor
without a login gets the login page and nothing else; TensorBoard answers only through the app's
login; SIGTERM ends the app and TensorBoard within 10 s while clients hold connections open.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import psutil
import pytest

from tests.browser_helpers import REPO_ROOT, AppProcess, free_port, running_app

pytestmark = pytest.mark.slow

USER, PASSWORD = "tester", "s3cret-pass"
SECRET_CHECKPOINT = "private-ckpt-7f3a"
SECRET_RUN = "private-run-9c1e"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    """The real app.py with --auth for a workspace holding a checkpoint and a run config to leak."""
    root = tmp_path_factory.mktemp("security")
    workspace = root / "workspace"
    (workspace / "checkpoints").mkdir(parents=True)
    (workspace / "checkpoints" / f"{SECRET_CHECKPOINT}.safetensors").write_bytes(b"not a checkpoint")
    (workspace / "runs" / SECRET_RUN).mkdir(parents=True)
    (workspace / "runs" / SECRET_RUN / "config.yaml").write_text(f"name: {SECRET_RUN}\n", encoding="utf-8")
    (root / "outside.txt").write_text("server secret\n", encoding="utf-8")
    _damaged_datasets(workspace)
    with running_app(workspace, root / "app.log", auth=f"{USER}:{PASSWORD}") as proc:
        yield proc


def _damaged_datasets(workspace: Path) -> None:
    """Two datasets the third audit found took the dashboard down: a manifest with a line that is not UTF-8
    (beside a good row), and one whose only row names its audio with a NUL byte."""
    good = {"id": "a", "audio": "audio/a.wav", "text": "hello", "speaker": "s", "language": "en", "duration": 1.0}
    (workspace / "datasets" / "latin").mkdir(parents=True)
    (workspace / "datasets" / "latin" / "manifest.jsonl").write_bytes(
        json.dumps(good).encode() + b"\n" + b'{"id": "caf\xe9"}\n')
    (workspace / "datasets" / "nul").mkdir()
    (workspace / "datasets" / "nul" / "manifest.jsonl").write_text(json.dumps({**good, "audio": "a\x00.wav"}) + "\n",
                                                                   encoding="utf-8")


@pytest.fixture(scope="module")
def session(app: AppProcess) -> Iterator[httpx.Client]:
    """An HTTP client logged in through Gradio's login route."""
    with httpx.Client(base_url=app.url, timeout=30.0) as client:
        response = client.post("/login", data={"username": USER, "password": PASSWORD})
        assert response.status_code == 200, response.text
        yield client


def fn_index(client: httpx.Client, api_name: str) -> int:
    """Return the index of the event whose api_name is `api_name` in the app's config."""
    config = client.get("/config").json()
    for dep in config["dependencies"]:
        if dep.get("api_name") == api_name:
            return int(dep["id"])
    raise AssertionError(f"no endpoint {api_name}")


def file_data(path: str) -> dict[str, Any]:
    """Return a client-supplied FileData object naming a server path."""
    return {"path": path, "meta": {"_type": "gradio.FileData"}}


def import_inputs(files: list[dict[str, Any]], name: str) -> list[Any]:
    """Return the inputs of the Dataset tab's import_dataset event (format, folder, files, name, language,
    speaker, tokenizer, Common Voice table, HF text and speaker columns, filter clips)."""
    return ["manifest", "", files, name, "", "", "", "", "", "", False]


def upload(client: httpx.Client, name: str, content: bytes) -> str:
    """Upload a file through Gradio's upload route; return the server path it got."""
    response = client.post("/gradio_api/upload", files=[("files", (name, content))])
    assert response.status_code == 200, response.text
    return response.json()[0]


def test_visitor_without_login_gets_only_the_login_page(app: AppProcess) -> None:
    """GET / shows the login form without the API description or any workspace file name; the rest is 401."""
    with httpx.Client(base_url=app.url, timeout=30.0) as anon:
        page = anon.get("/")
        assert page.status_code == 200
        assert '"auth_required":true' in page.text.replace(" ", "")
        assert SECRET_CHECKPOINT not in page.text and SECRET_RUN not in page.text
        assert "import_dataset" not in page.text
        for path in ("/config", "/gradio_api/info", "/gradio_api/heartbeat/anon", "/gradio_api/queue/data",
                     f"/gradio_api/file={app.workspace}/checkpoints/{SECRET_CHECKPOINT}.safetensors",
                     "/tensorboard/", "/gradio_api/openapi.json"):
            assert anon.get(path).status_code == 401, path
        cancel = anon.post("/gradio_api/cancel", json={"session_hash": "x", "fn_index": 0, "event_id": "e"})
        assert cancel.status_code == 401
        join = anon.post("/gradio_api/queue/join", json={"data": [], "fn_index": 0, "session_hash": "x"})
        assert join.status_code == 401


def _tensorboard_ports(app: AppProcess) -> list[int]:
    """Return the TCP ports that app.py's TensorBoard child and everything it started listen on."""
    children = psutil.Process(app.proc.pid).children(recursive=True)
    boards = [p for p in children if "core.tensorboard_server" in " ".join(p.cmdline())]
    assert len(boards) == 1, [p.cmdline() for p in children]
    group = [boards[0], *boards[0].children(recursive=True)]
    return sorted({c.laddr.port for p in group for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN})


def test_tensorboard_is_reachable_only_through_the_app_login(app: AppProcess, session: httpx.Client) -> None:
    """A run's scalars are served at /tensorboard/ to the logged-in session only; TensorBoard's own loopback
    port answers 403 to anyone else on the machine, and no other port (a data server) is open."""
    from torch.utils.tensorboard import SummaryWriter

    run_tb = app.workspace / "runs" / "tb-secret-run" / "tb"
    writer = SummaryWriter(str(run_tb))
    writer.add_scalar("train/loss", 1.25, 1)
    writer.close()
    deadline = time.monotonic() + 120
    while "tb-secret-run" not in (listed := session.get("/tensorboard/data/runs")).text:  # reloads every 5 s
        assert time.monotonic() < deadline, listed.text
        time.sleep(1)
    assert listed.status_code == 200
    with httpx.Client(base_url=app.url, timeout=30.0) as anon:
        for path in ("/tensorboard/", "/tensorboard/data/runs", "/tensorboard/data/plugin/scalars/tags"):
            response = anon.get(path)
            assert response.status_code == 401 and "tb-secret-run" not in response.text, path
    ports = _tensorboard_ports(app)
    assert len(ports) == 1, ports
    direct = httpx.get(f"http://127.0.0.1:{ports[0]}/tensorboard/data/runs", timeout=10)
    assert direct.status_code == 403 and "tb-secret-run" not in direct.text
    spoofed = httpx.get(f"http://127.0.0.1:{ports[0]}/tensorboard/data/runs", timeout=10,
                        headers={"X-LinguaForge-TensorBoard": "guess"})
    assert spoofed.status_code == 403


@pytest.mark.parametrize("route", ["queue", "call"])
def test_file_parameters_outside_the_roots_are_refused(app: AppProcess, session: httpx.Client, route: str) -> None:
    """A server path outside the workspace, a symlink leading out and a URL are refused before any handler runs."""
    link = app.workspace / "link-out.txt"
    if not link.exists():
        link.symlink_to(app.workspace.parent / "outside.txt")
    hostile = ["/etc/passwd", str(app.workspace.parent / "outside.txt"), str(link), "http://127.0.0.1:1/x.wav",
               "../outside.txt"]
    endpoints = {
        "import_dataset": lambda p: import_inputs([file_data(p)], f"stolen-{route}"),
        "synthesize": lambda p: ["checkpoints/x.safetensors", "hello", "", file_data(p), 0.8, 50, 0.9, 0],
    }
    for api_name, inputs in endpoints.items():
        for path in hostile:
            data = inputs(path)
            if route == "queue":
                response = session.post("/gradio_api/queue/join", json={
                    "data": data, "fn_index": fn_index(session, api_name), "session_hash": "hostile"})
            else:
                response = session.post(f"/gradio_api/call/{api_name}", json={"data": data})
            assert response.status_code == 400, (api_name, path, response.text)
            assert "Upload the file" in response.json()["error"]
    assert not (app.workspace / "uploads").exists()
    assert not (app.workspace / "outputs" / "references").exists()


def test_uploaded_and_workspace_files_are_accepted(app: AppProcess, session: httpx.Client) -> None:
    """A file uploaded in this session and a file inside the workspace pass the check and reach the handler."""
    uploaded = upload(session, "metadata.jsonl", b'{"audio": "a.wav", "text": "x"}\n')
    inside = app.workspace / "inputs" / "a.wav"  # a clip already in the workspace, handed in as a file parameter
    inside.parent.mkdir(exist_ok=True)
    inside.write_bytes(b"RIFF not really")
    response = session.post("/gradio_api/call/import_dataset",
                            json={"data": import_inputs([file_data(uploaded), file_data(str(inside))], "accepted")})
    assert response.status_code == 200, response.text
    event_id = response.json()["event_id"]
    with session.stream("GET", f"/gradio_api/call/import_dataset/{event_id}", timeout=600.0) as stream:
        for line in stream.iter_lines():
            if line.startswith(("event: complete", "event: error")):
                break
    copied = app.workspace / "uploads" / "accepted"
    assert (copied / "metadata.jsonl").read_bytes() == b'{"audio": "a.wav", "text": "x"}\n'
    assert (copied / "a.wav").read_bytes() == b"RIFF not really"


def _session_processes(pid: int) -> list[psutil.Process]:
    parent = psutil.Process(pid)
    return [parent, *parent.children(recursive=True)]


def test_sigterm_ends_app_and_tensorboard_within_10s_with_connections_open(tmp_path: Path) -> None:
    """With an anonymous and a logged-in heartbeat connection held open, SIGTERM ends everything in 10 s."""
    workspace = tmp_path / "workspace"
    with running_app(workspace, tmp_path / "app.log", auth=f"{USER}:{PASSWORD}") as app:
        processes = _session_processes(app.proc.pid)
        assert any("tensorboard" in " ".join(p.cmdline()) for p in processes)
        held: list[httpx.Response] = []
        clients = [httpx.Client(base_url=app.url, timeout=None) for _ in range(2)]
        clients[1].post("/login", data={"username": USER, "password": PASSWORD})

        def hold(client: httpx.Client) -> None:
            try:
                with client.stream("GET", "/gradio_api/heartbeat/held") as response:
                    held.append(response)
                    for _ in response.iter_bytes():
                        pass
            except httpx.HTTPError:
                pass

        threads = [threading.Thread(target=hold, args=(c,), daemon=True) for c in clients]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(held) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sorted(r.status_code for r in held) == [200, 401]
        started = time.monotonic()
        app.proc.send_signal(signal.SIGTERM)
        app.proc.wait(timeout=30)
        gone, alive = psutil.wait_procs(processes, timeout=max(0.1, 10 - (time.monotonic() - started)))
        elapsed = time.monotonic() - started
        for client in clients:
            client.close()
        assert not alive, [p.cmdline() for p in alive]
        assert elapsed <= 10, f"shutdown took {elapsed:.1f}s"


def _write_tone(path: Path, seconds: float = 1.0, rate: int = 16000) -> None:
    import numpy as np
    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    sf.write(str(path), (0.3 * np.sin(2 * np.pi * 220 * t)).astype("float32"), rate)


def _run_event(client: httpx.Client, api_name: str, data: list[Any]) -> str:
    """Call a dashboard event through /gradio_api/call and return its whole SSE answer once it ends."""
    response = client.post(f"/gradio_api/call/{api_name}", json={"data": data})
    assert response.status_code == 200, response.text
    chunks: list[str] = []
    with client.stream("GET", f"/gradio_api/call/{api_name}/{response.json()['event_id']}", timeout=600.0) as stream:
        for line in stream.iter_lines():
            chunks.append(line)
            if len(chunks) > 1 and chunks[-2].startswith(("event: complete", "event: error")):
                break
    return "\n".join(chunks)


def test_imported_manifest_and_folder_symlink_are_confined(app: AppProcess, session: httpx.Client) -> None:
    """A manifest row reaching out (relative `../` or absolute) and a symlinked clip are rejected, not imported."""
    outside = app.workspace.parent / "outside.wav"
    _write_tone(outside)
    incoming = app.workspace / "incoming"
    incoming.mkdir(exist_ok=True)
    _write_tone(incoming / "inside.wav")
    rows = [
        {"id": "inside", "audio": "inside.wav", "text": "hello there", "speaker": "s", "language": "en"},
        {"id": "relative-out", "audio": "../../outside.wav", "text": "hello there", "speaker": "s", "language": "en"},
        {"id": "absolute-out", "audio": str(outside), "text": "hello there", "speaker": "s", "language": "en"},
    ]
    (incoming / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    answer = _run_event(session, "import_dataset", ["manifest", "incoming/manifest.jsonl", None, "confined-manifest", "", "", "",
                                                        "", "", "", False])
    assert "event: complete" in answer, answer
    dataset = app.workspace / "datasets" / "confined-manifest"
    kept = [json.loads(line)["id"] for line in (dataset / "manifest.jsonl").read_text().splitlines()]
    rejected = {json.loads(line)["id"]: json.loads(line)["reason"]
                for line in (dataset / "rejects.jsonl").read_text().splitlines()}
    assert kept == ["inside"]
    assert set(rejected) == {"relative-out", "absolute-out"}
    assert all("outside the allowed folders" in reason for reason in rejected.values())

    clips = app.workspace / "clips"
    clips.mkdir(exist_ok=True)
    _write_tone(clips / "a.wav")
    (clips / "a.txt").write_text("hello there", encoding="utf-8")
    (clips / "b.wav").symlink_to(outside)
    (clips / "b.txt").write_text("hello there", encoding="utf-8")
    answer = _run_event(session, "import_dataset", ["folder", "clips", None, "confined-folder", "en", "", "", "", "", "", False])
    assert "event: complete" in answer, answer
    dataset = app.workspace / "datasets" / "confined-folder"
    kept = [json.loads(line)["id"] for line in (dataset / "manifest.jsonl").read_text().splitlines()]
    rejected = [json.loads(line) for line in (dataset / "rejects.jsonl").read_text().splitlines()]
    assert kept == ["a"]
    assert [r["id"] for r in rejected] == ["b"] and "outside the allowed folders" in rejected[0]["reason"]


def test_the_app_starts_with_damaged_datasets_and_names_them(app: AppProcess, session: httpx.Client) -> None:
    """app.py started (the fixture) with both damaged datasets present: its log names each and what is damaged,
    and the Dataset tab lists them with their readable rows and the damage."""
    log = app.log_text()
    assert "warning: dataset latin: 1 damaged line in manifest.jsonl, first line 2: not UTF-8" in log, log
    assert "warning: dataset nul: 1 damaged line in manifest.jsonl, first row 'a': audio holds a NUL byte" in log, log
    assert "Traceback" not in log
    config = json.dumps(session.get("/config").json(), ensure_ascii=False)
    assert "latin \u2014 1 clips, 0.000 h (damaged: 1 damaged line in manifest.jsonl, first line 2: not UTF-8)" in config
    assert "nul \u2014 1 clips" in config


def test_an_uploaded_hf_state_naming_an_outside_arrow_is_refused(app: AppProcess, session: httpx.Client) -> None:
    """The third audit's finding 1 through the Dataset tab: uploading only state.json (naming the arrow file of a
    save_to_disk folder outside the roots by its absolute path) and dataset_info.json; the import is refused
    in one line and nothing of the outside table is imported."""
    import io

    from datasets import Dataset

    outside = app.workspace.parent / "outside-hf"
    clip = io.BytesIO()
    _write_tone(app.workspace.parent / "outside-clip.wav")
    clip.write((app.workspace.parent / "outside-clip.wav").read_bytes())
    Dataset.from_dict({"audio": [{"bytes": clip.getvalue(), "path": "s.wav"}], "text": ["server secret"]}).save_to_disk(
        str(outside))
    state = json.dumps({"_data_files": [{"filename": str(outside / "data-00000-of-00001.arrow")}]}).encode()
    files = [file_data(upload(session, "state.json", state)),
             file_data(upload(session, "dataset_info.json", (outside / "dataset_info.json").read_bytes()))]
    answer = _run_event(session, "import_dataset", ["hf", "", files, "hf-upload", "", "", "", "", "", "", False])
    shown = answer.replace("\\", "")  # the page's Markdown escapes (`\_`) keep the key's underscores and brackets
    assert "leads outside the folder" in shown and "_data_files[0].filename" in shown, answer
    assert not (app.workspace / "datasets" / "hf-upload").exists()


def test_cli_import_reports_rows_pointing_outside(tmp_path: Path) -> None:
    """On the CLI, rows outside the input folder are imported but listed in the report."""
    from core.cli import main as cli_main

    _write_tone(tmp_path / "elsewhere.wav")
    incoming = tmp_path / "in"
    incoming.mkdir()
    _write_tone(incoming / "inside.wav")
    rows = [{"id": "inside", "audio": "inside.wav", "text": "hello", "speaker": "s", "language": "en"},
            {"id": "out", "audio": "../elsewhere.wav", "text": "hello", "speaker": "s", "language": "en"}]
    (incoming / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = tmp_path / "out" / "summary.json"
    code = cli_main(["dataset", "import", "--format", "manifest", "--input", str(incoming / "manifest.jsonl"),
                     "--output", str(tmp_path / "out")])
    assert code == 0
    report = json.loads(summary.read_text())
    assert report["kept"] == 2
    assert [(r["id"], r["audio"]) for r in report["outside_input"]] == [("out", str((tmp_path / "elsewhere.wav").resolve()))]


@pytest.mark.browser
def test_login_page_still_logs_in_through_the_gate(app: AppProcess) -> None:
    """The gated login page loads its scripts and styles, and its form logs in to the whole dashboard."""
    from tests.browser_helpers import CHROMIUM_ARGS, chromium_path

    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page()
            tab.set_default_timeout(60_000)
            tab.goto(app.url)
            tab.get_by_label("username").fill(USER)
            tab.get_by_label("password").fill(PASSWORD)
            tab.get_by_role("button", name="Login").click()
            tab.get_by_role("tab", name="Training").wait_for()
        finally:
            browser.close()
