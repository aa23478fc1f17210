"""The speech server as a real process on 127.0.0.1, spoken to by the `openai` package's client and httpx:
OpenAI's request shape answered with wav and flac at the model's rate, /v1/models, batching, every bad
request a 4xx with one line while the server keeps serving, 429 when the queue is full, the bearer
token, and bad command lines refused (exit 2, one line) before the model loads."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import torch

from core.cli import main
from core.serve.batching import BatchQueue, QueueFull, Unavailable
from tests.serve_helpers import ServerProcess, chatterbox_server, indextts_server, running_server, write_voice
from tests.test_inference import _tts_checkpoint

CODES = 96  # every sentence decodes to exactly this many codes (the stop logit is suppressed)
GAP = 2400  # 0.15 s of silence between sentences
TOKEN = "s3cret-token"
ONE = "The cat sleeps."
TWO = "The cat sleeps. We walked home."


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """A workspace with a small own-model TTS checkpoint and a voices folder with `anna` and `ben`."""
    workspace = tmp_path_factory.mktemp("serve") / "workspace"
    checkpoint = _tts_checkpoint(workspace, CODES)
    voices = workspace / "voices"
    write_voice(voices / "anna.wav", 220.0)
    write_voice(voices / "ben.wav", 330.0)
    yield workspace, checkpoint, voices


@pytest.fixture(scope="module")
def server(served: tuple[Path, Path, Path]) -> Iterator[ServerProcess]:
    """The server with its defaults but --max-input-chars 200."""
    workspace, checkpoint, voices = served
    with running_server(workspace, checkpoint, voices, workspace / "serve.log", "--max-input-chars", "200") as proc:
        yield proc


def _client(server: ServerProcess, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=120)


@pytest.fixture(scope="module", autouse=True)
def sentence_samples(served: tuple[Path, Path, Path]) -> None:
    """Measure what the checkpoint's codec decodes CODES codes to: every sentence's length in samples."""
    from core.speech.codec import load_codec

    codec = load_codec(served[0] / "codecs" / "c16.pt")
    SENTENCE_SAMPLES.append(codec.decode(torch.zeros(CODES, dtype=torch.long)).numel())


SENTENCE_SAMPLES: list[int] = []


def _samples(sentences: int) -> int:
    return sentences * SENTENCE_SAMPLES[0] + (sentences - 1) * GAP


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_openai_client_gets_wav_and_flac_at_the_model_rate(server: ServerProcess) -> None:
    client = _client(server)
    wav = client.audio.speech.create(model="tts", input=TWO, voice="anna", response_format="wav").content
    data, rate = sf.read(io.BytesIO(wav), dtype="int16")
    assert sf.info(io.BytesIO(wav)).format == "WAV" and rate == 16000
    assert len(data) == _samples(2) and np.abs(data).max() > 0
    flac = client.audio.speech.create(model="tts", input=TWO, voice="anna", response_format="flac").content
    assert flac[:4] == b"fLaC"
    same, flac_rate = sf.read(io.BytesIO(flac), dtype="int16")
    # one seed, one request: the same codes; the codec's Griffin-Lim decode differs by float rounding only
    assert flac_rate == 16000 and len(same) == len(data) and np.corrcoef(same, data)[0, 1] > 0.99
    one = client.audio.speech.create(model="tts", input=ONE, voice="anna", response_format="wav").content
    assert sf.info(io.BytesIO(one)).frames == _samples(1)
    assert [m.id for m in client.models.list()] == ["tts"]


def test_requests_that_arrive_together_are_spoken_in_one_batch(server: ServerProcess) -> None:
    texts = [" ".join([ONE] * n) for n in (1, 2, 3, 1, 2, 3)]
    voices = ["anna", "anna", "anna", "ben", "ben", "ben"]
    lengths: dict[int, int] = {}
    start = threading.Barrier(len(texts))

    def ask(i: int) -> None:
        start.wait()
        body = {"model": "tts", "input": texts[i], "voice": voices[i], "response_format": "wav"}
        answer = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        lengths[i] = sf.info(io.BytesIO(answer.content)).frames

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert lengths == {i: _samples(n) for i, n in enumerate((1, 2, 3, 1, 2, 3))}
    health = httpx.get(f"{server.url}/health").json()
    assert health["batched"] is True and health["largest_batch"] >= 2


BAD_REQUESTS = [
    ({"model": "tts", "input": "word " * 41, "voice": "anna"}, 413, "205 characters"),
    ({"model": "tts", "input": "hi", "voice": "nobody"}, 400, "voice 'nobody'"),
    ({"model": "tts", "input": "hi", "voice": "../voices/anna"}, 400, "voice '../voices/anna'"),
    ({"model": "tts-1", "input": "hi", "voice": "anna"}, 404, "model 'tts-1'"),
    ({"model": "tts", "input": "hi", "voice": "anna", "response_format": "aac"}, 400, "no AAC encoder"),
    ({"model": "tts", "input": "hi", "voice": "anna", "response_format": "ogg"}, 400, "response_format 'ogg'"),
    ({"model": "tts", "input": "hi", "voice": "anna", "speed": 5}, 400, "speed 5"),
    ({"model": "tts", "input": "hi", "voice": "anna", "stream_format": "chunks"}, 400, "stream_format 'chunks'"),
    ({"model": "tts", "input": "hi", "voice": "anna", "pitch": 2}, 400, "pitch"),
    ({"model": "tts", "voice": "anna"}, 400, "input"),
    ({"model": "tts", "input": "   ", "voice": "anna"}, 400, "input is empty"),
    ({"model": "tts", "input": "@@ ##", "voice": "anna"}, 400, "input '@@ ##'"),
    ("{not json", 400, "not valid JSON"),
    ("[1, 2]", 400, "body"),
]


@pytest.mark.parametrize("body, status, fragment", BAD_REQUESTS, ids=[str(i) for i in range(len(BAD_REQUESTS))])
def test_a_bad_request_gets_a_4xx_line_and_the_server_serves_on(server: ServerProcess, body: object, status: int,
                                                                fragment: str) -> None:
    if isinstance(body, str):
        answer = httpx.post(f"{server.url}/v1/audio/speech", content=body, headers={"content-type": "application/json"})
    else:
        answer = httpx.post(f"{server.url}/v1/audio/speech", json=body)
    message = answer.json()["error"]["message"]
    assert answer.status_code == status and fragment in message and "\n" not in message, answer.text
    good = httpx.post(f"{server.url}/v1/audio/speech", json={"model": "tts", "input": ONE, "voice": "ben"}, timeout=120)
    assert good.status_code == 200 and sf.info(io.BytesIO(good.content)).frames == _samples(1)


def test_a_chunked_or_oversized_body_is_refused_before_it_is_read(server: ServerProcess) -> None:
    chunked = httpx.post(f"{server.url}/v1/audio/speech", content=iter([b'{"model": "tts", ', b'"input": "hi", "voice": "anna"}']),
                         headers={"content-type": "application/json"})
    assert chunked.status_code == 411 and "Content-Length" in chunked.json()["error"]["message"]
    huge = httpx.post(f"{server.url}/v1/audio/speech", content=b" " * 10_000, headers={"content-type": "application/json"})
    assert huge.status_code == 413 and "request body of 10000 bytes" in huge.json()["error"]["message"]


def test_openai_client_sees_unknown_model_as_not_found(server: ServerProcess) -> None:
    with pytest.raises(openai.NotFoundError, match="model 'tts-hd'"):
        _client(server).audio.speech.create(model="tts-hd", input=ONE, voice="anna")


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_full_queue_answers_429_and_the_token_is_required(served: tuple[Path, Path, Path]) -> None:
    workspace, checkpoint, voices = served
    with running_server(workspace, checkpoint, voices, workspace / "serve-token.log", "--queue-limit", "1",
                        "--max-batch", "1", env={"LINGUAFORGE_SERVE_TOKEN": TOKEN}) as server:
        body = {"model": "tts", "input": " ".join([ONE] * 6), "voice": "anna"}
        assert httpx.post(f"{server.url}/v1/audio/speech", json=body).status_code == 401
        wrong = httpx.get(f"{server.url}/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "bearer token" in wrong.json()["error"]["message"]
        with pytest.raises(openai.AuthenticationError):
            _client(server).models.list()
        statuses: list[int] = []
        start = threading.Barrier(6)

        def ask() -> None:
            start.wait()
            answer = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=120,
                                headers={"Authorization": f"Bearer {TOKEN}"})
            if answer.status_code == 429:
                assert answer.json()["error"]["code"] == "queue_full"
            statuses.append(answer.status_code)

        threads = [threading.Thread(target=ask) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(set(statuses)) == [200, 429] and statuses.count(200) >= 2, statuses
        spoken = _client(server, TOKEN).audio.speech.create(model="tts", input=ONE, voice="anna").content
        assert sf.info(io.BytesIO(spoken)).frames == _samples(1)


def test_bad_command_lines_exit_2_with_one_line(served: tuple[Path, Path, Path], server: ServerProcess,
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture) -> None:
    workspace, checkpoint, voices = served
    monkeypatch.setenv("LINGUAFORGE_WORKSPACE", str(workspace))
    outside = tmp_path / "voices"
    write_voice(outside / "eve.wav")
    port = server.url.rsplit(":", 1)[1]
    cases = [
        (["--checkpoint", str(checkpoint), "--voices", str(outside)], "outside the allowed folders"),
        (["--checkpoint", str(checkpoint), "--voices", str(voices), "--port", port], f"--port {port}: cannot listen"),
        (["--checkpoint", str(workspace / "nope.pt"), "--voices", str(voices)], "nope.pt: no such file"),
        (["--checkpoint", str(checkpoint), "--voices", str(workspace / "codecs")], "no reference clip"),
        (["--checkpoint", str(checkpoint), "--voices", str(voices), "--max-input-chars", "9000"], "--max-input-chars 9000"),
        (["--checkpoint", str(checkpoint), "--voices", str(voices), "--option", "cfg_weight=0.5"],
         "--option cfg_weight: speaker options are for Chatterbox and IndexTTS2"),
    ]
    for argv, fragment in cases:
        assert main(["serve", *argv]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0], lines


def test_batch_queue_takes_what_waits_refuses_past_its_limit_and_fails_the_waiting_on_close() -> None:
    release = threading.Event()
    seen: list[list[int]] = []

    def speak(jobs: list[int]) -> list[object]:
        seen.append(list(jobs))
        release.wait(10)
        return [job * 10 if job != 3 else ValueError("three") for job in jobs]

    batches: BatchQueue[int] = BatchQueue(speak, limit=3, max_batch=2)
    first = batches.submit(0)
    while not seen:  # the worker holds job 0; what follows waits
        threading.Event().wait(0.01)
    waiting = [batches.submit(job) for job in (1, 2, 3)]
    with pytest.raises(QueueFull, match="3 requests are waiting"):
        batches.submit(4)
    release.set()
    assert first.result(10) == 0 and waiting[0].result(10) == 10 and waiting[1].result(10) == 20
    with pytest.raises(ValueError, match="three"):
        waiting[2].result(10)
    assert seen == [[0], [1, 2], [3]]
    release.clear()
    held = batches.submit(5)
    while len(seen) < 4:
        threading.Event().wait(0.01)
    queued = batches.submit(6)
    closing = threading.Thread(target=batches.close)
    closing.start()
    with pytest.raises(Unavailable):
        queued.result(10)
    with pytest.raises(Unavailable):
        batches.submit(7)
    release.set()
    closing.join(10)
    assert held.result(10) == 50 and not closing.is_alive()


@pytest.mark.slow
def test_a_chatterbox_checkpoint_speaks_through_the_server_one_request_at_a_time(tmp_path: Path) -> None:
    """The reduced T3 extended to Amharic, with the full published S3Gen (random weights): the server
    speaks it through the Chatterbox speaker at 24 kHz, (speech tokens − 1) × 960 samples, at most
    --max-seconds of tokens; a language its tokenizer has no tag for is a 400 and the server serves on."""
    from core.data.sample_text import AMHARIC_SENTENCES

    with chatterbox_server(tmp_path / "workspace", max_seconds=0.48).run() as server:
        health = httpx.get(f"{server.url}/health").json()
        assert (health["family"], health["sample_rate"], health["batched"]) == ("chatterbox", 24000, False)
        client = _client(server)
        audio = client.audio.speech.create(model="t3_am", input=AMHARIC_SENTENCES[1], voice="anna").content
        data, rate = sf.read(io.BytesIO(audio), dtype="float32")
        assert rate == 24000 and len(data) % 960 == 0 and 960 <= len(data) <= 11 * 960  # 0.48 s = 12 tokens at most
        assert np.isfinite(data).all() and np.abs(data).max() > 0
        with pytest.raises(openai.BadRequestError, match=r"has no \[xx\] tag"):
            client.audio.speech.create(model="t3_am", input="selam", voice="anna", extra_body={"language": "xx"})
        again = client.audio.speech.create(model="t3_am", input=AMHARIC_SENTENCES[1], voice="anna").content
        assert sf.info(io.BytesIO(again)).samplerate == 24000


@pytest.mark.slow
def test_a_published_indextts_gpt_speaks_through_the_server(tmp_path: Path) -> None:
    """The reduced IndexTTS2 speech folder (a 1-layer GPT at width 1280, s2mel, BigVGAN; random weights),
    its published `gpt.pth` served with --family: GPT → s2mel → BigVGAN at 22.05 kHz, whole mel frames of 256."""
    with indextts_server(tmp_path / "workspace", max_seconds=0.25).run() as server:
        health = httpx.get(f"{server.url}/health").json()
        assert (health["family"], health["sample_rate"], health["batched"]) == ("indextts", 22050, False)
        audio = _client(server).audio.speech.create(model="gpt", input="HELLO THERE", voice="anna",
                                                    response_format="flac").content
        data, rate = sf.read(io.BytesIO(audio), dtype="float32")
        assert rate == 22050 and len(data) > 0 and len(data) % 256 == 0 and np.isfinite(data).all()
