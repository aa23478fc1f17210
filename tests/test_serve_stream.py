"""Streamed speech from the real server on 127.0.0.1 (`python -m core serve`), read by the `openai` client's
`with_streaming_response` and by httpx: the first audio arrives long before the whole utterance would, every
response format streams to a file that decodes, SSE events parse, speed changes the duration, a client that
goes away stops its generation or frees its place in the queue (the engine's counters show it), streamed and
whole requests share the bounded queue, and the streamed audio of the same tokens agrees with the whole
utterance's within the tolerance docs/streaming.md gives — for the own quickstart-shaped model here, for the
codec on real (espeak) speech, and for the reduced published families (Chatterbox, Chatterbox-Turbo,
IndexTTS2, Sesame CSM)."""

from __future__ import annotations

import base64
import io
import json
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import torch

from core.eval.metrics import mcd_dtw
from core.inference import SILENCE_S
from tests.serve_helpers import (
    ServerProcess, chatterbox_server, csm_server, indextts_server, running_server, turbo_server, write_voice,
)

CODES = 160  # one sentence: 160 codes at the quickstart codec's 31.25 a second = 5.12 s
HOP = 512
SENTENCE = "The cat sleeps by the warm fire."
SAMPLES = (CODES - 1) * HOP  # Griffin-Lim's length of one sentence at 16 kHz
OWN_TOLERANCE_DB = 0.5  # streamed vs whole MCD-DTW of the same codes, own codec (docs/streaming.md)
CHATTERBOX_TOLERANCE_DB = 3.0
TURBO_TOLERANCE_DB = 3.0
INDEXTTS_TOLERANCE_DB = 0.5
CSM_TOLERANCE = 1.5 / 32768  # streamed vs whole CSM sample: at most one step of the 16-bit wav (frame by frame is exact)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """A workspace with a quickstart-shaped own checkpoint (tiny preset, 256 codes, hop 512) whose sentences
    are exactly CODES codes long, and a voices folder with `anna`."""
    from models.registry import MODEL_SIZES
    from tests.trainer_helpers import stopless_tts_checkpoint

    workspace = tmp_path_factory.mktemp("serve-stream") / "workspace"
    checkpoint = stopless_tts_checkpoint(workspace, CODES, 256, MODEL_SIZES["tiny"], "quick.pt", hop_length=HOP)
    voices = write_voice(workspace / "voices" / "anna.wav").parent
    yield workspace, checkpoint, voices


@pytest.fixture(scope="module")
def server(served: tuple[Path, Path, Path]) -> Iterator[ServerProcess]:
    """The server speaking one request at a time with room for one waiting request."""
    workspace, checkpoint, voices = served
    with running_server(workspace, checkpoint, voices, workspace / "serve.log", "--max-batch", "1",
                        "--queue-limit", "1") as proc:
        yield proc


def _client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def _body(text: str = SENTENCE, **extra: Any) -> dict[str, Any]:
    return {"model": "quick", "input": text, "voice": "anna", **extra}


def _health(server: ServerProcess) -> dict[str, Any]:
    return httpx.get(f"{server.url}/health", timeout=10).json()


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s:.0f} s"
        time.sleep(0.05)


def _decode(data: bytes, audio_format: str) -> tuple[np.ndarray, int]:
    """Return (samples, rate) of a streamed file: pcm as raw 24 kHz samples, flac through ffmpeg (libsndfile
    cannot read a FLAC stream of unknown length to its end), the rest through soundfile."""
    if audio_format == "pcm":
        return np.frombuffer(data, "<i2").astype(np.float32) / 32767, 24000
    if audio_format == "flac":
        assert data[:4] == b"fLaC"
        if shutil.which("ffmpeg") is None:
            pytest.skip("ffmpeg is not installed; ./test.sh installs it to decode the streamed FLAC")
        decoded = subprocess.run(["ffmpeg", "-v", "error", "-i", "pipe:0", "-f", "s16le", "-ac", "1", "pipe:1"],
                                 input=data, capture_output=True, check=True).stdout
        return np.frombuffer(decoded, "<i2").astype(np.float32) / 32767, sf.info(io.BytesIO(data)).samplerate
    samples, rate = sf.read(io.BytesIO(data), dtype="float32")
    return samples, rate


@pytest.mark.slow  # six calls of 21 s of speech: 70 s at load 13 (the file's other tests 3-35 s there)
def test_the_openai_client_hears_the_first_audio_long_before_the_whole_utterance(server: ServerProcess) -> None:
    """Four 5.1 s sentences (21 s of speech, seconds to make here): the streamed call's first bytes come in
    under half the time the whole call takes (each the fastest of three calls, so a busy machine's pauses do
    not decide it; measured 0.43 s against 4.8 s for eight sentences at load 9). One sentence was too short:
    the whole answer took 0.1 s, HTTP's own overhead, so the ratio measured nothing and failed quiet. The
    stream is a wav of exactly the whole one's length and agrees with it (the same codes: one seed)."""
    client = _client(server)
    text = " ".join([SENTENCE] * 4)
    client.audio.speech.create(**_body(), response_format="wav")  # warm-up: the first request pays for loading
    whole_times, first_times = [], []
    for _ in range(3):
        start = time.perf_counter()
        whole = client.audio.speech.create(**_body(text), response_format="wav").content
        whole_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        pieces = []
        with client.audio.speech.with_streaming_response.create(**_body(text), response_format="wav",
                                                                 stream_format="audio") as answer:
            assert answer.headers["content-type"] == "audio/wav" and answer.headers["x-sample-rate"] == "16000"
            for piece in answer.iter_bytes():
                if not pieces:
                    first_times.append(time.perf_counter() - start)
                pieces.append(piece)
    streamed, rate = sf.read(io.BytesIO(b"".join(pieces)), dtype="float32")
    reference, _ = sf.read(io.BytesIO(whole), dtype="float32")
    assert len(first_times) == 3 and min(first_times) < 0.5 * min(whole_times), (first_times, whole_times)
    assert rate == 16000 and len(streamed) == len(reference) == 4 * SAMPLES + 3 * int(SILENCE_S * 16000)
    assert mcd_dtw(streamed, reference) <= OWN_TOLERANCE_DB


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
@pytest.mark.parametrize("audio_format", ["wav", "flac", "pcm", "mp3", "opus"])
def test_every_format_streams_to_a_file_that_decodes(server: ServerProcess, audio_format: str) -> None:
    """The concatenated stream of each response format decodes to the sentence's duration (mp3 adds its
    encoder delay and the placeholder frame: at most 0.15 s), as the whole answer in that format does."""
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=300,
                      json=_body(response_format=audio_format, stream_format="audio")) as answer:
        assert answer.status_code == 200
        pieces = list(answer.iter_bytes())
    whole = httpx.post(f"{server.url}/v1/audio/speech", json=_body(response_format=audio_format), timeout=300)
    seconds = SAMPLES / 16000
    for data in (b"".join(pieces), whole.content):
        samples, rate = _decode(data, audio_format)
        assert rate == (24000 if audio_format in ("pcm", "opus") else 16000)
        assert seconds - 0.01 <= len(samples) / rate <= seconds + (0.15 if audio_format == "mp3" else 0.01)
        assert np.isfinite(samples).all()


def test_sse_events_parse_and_carry_the_audio_and_the_usage(server: ServerProcess) -> None:
    with _client(server).audio.speech.with_streaming_response.create(
            **_body(), response_format="pcm", stream_format="sse") as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        lines = answer.read().decode().splitlines()
    events = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert all(line.startswith("data: ") for line in lines if line)
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1) and len(events) >= 3
    assert events[-1] == {"type": "speech.audio.done",
                          "usage": {"input_tokens": 8, "output_tokens": CODES, "total_tokens": 8 + CODES}}
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert abs(len(pcm) // 2 - SAMPLES * 24000 // 16000) <= 2


def test_speed_changes_the_duration_streamed_and_whole_alike(server: ServerProcess) -> None:
    for speed in (0.5, 2.0):
        with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=300,
                          json=_body(speed=speed, stream_format="audio")) as answer:
            streamed, _ = sf.read(io.BytesIO(b"".join(answer.iter_bytes())), dtype="float32")
        whole, _ = sf.read(io.BytesIO(httpx.post(f"{server.url}/v1/audio/speech", json=_body(speed=speed),
                                                 timeout=300).content), dtype="float32")
        assert len(streamed) == len(whole) and abs(len(whole) / SAMPLES - 1 / speed) < 0.02
        assert mcd_dtw(streamed, whole) <= OWN_TOLERANCE_DB


def _send_raw(server: ServerProcess, body: dict[str, Any]) -> socket.socket:
    """Send a speech request on a raw socket (nothing read back) and return the socket."""
    payload = json.dumps(body).encode()
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    return sock


def test_a_client_that_goes_away_stops_its_generation_and_frees_its_place(server: ServerProcess) -> None:
    """Thirty sentences streamed at a quarter speed (two minutes of audio to vocode): the client reads the first
    audio and leaves; the engine stops at its next step, short of every code, and serves on. A second stream
    waiting meanwhile in the queue (the server speaks one request at a time, with one place to wait) fills the
    queue, so a whole request gets 429; when that client leaves, its place is free at once and it is never spoken."""
    long = " ".join([SENTENCE] * 30)
    before = _health(server)
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=_body(long, speed=0.25, stream_format="audio"),
                      timeout=300) as first:
        audio = first.iter_bytes()  # kept: a generator dropped here would close the connection at once
        next(audio)
        waiting = _send_raw(server, _body(long, stream_format="audio"))
        _wait(lambda: _health(server)["waiting"] == 1, 30, "the second stream waiting")
        full = httpx.post(f"{server.url}/v1/audio/speech", json=_body(), timeout=30)
        assert full.status_code == 429 and full.json()["error"]["code"] == "queue_full"
        waiting.close()
        # Generous ceilings, not the claim: had the place waited for the first stream, that stream would end and the
        # departed one be spoken, which the request count below refuses.
        _wait(lambda: _health(server)["waiting"] == 0, 60, "the departed client's place freed")
    _wait(lambda: _health(server)["speaking"] == 0, 120, "generation stopped")
    after = _health(server)
    assert after["stopped"] == before["stopped"] + 1 and after["streams"] == before["streams"] + 1
    assert after["requests"] == before["requests"] + 1  # the withdrawn stream was never spoken
    assert 0 < after["speech_tokens"] - before["speech_tokens"] < 30 * CODES
    assert httpx.post(f"{server.url}/v1/audio/speech", json=_body(), timeout=300).status_code == 200


@pytest.mark.slow  # quick loop: over 6 s at load 4 (docs/benchmarks.md, the quick loop)
def test_the_codec_streams_real_speech_within_the_tolerance(tmp_path: Path) -> None:
    """The codes of espeak recordings, vocoded in chunks while they come, against the same codes vocoded
    whole: the same length to the sample, MCD-DTW within OWN_TOLERANCE_DB, and `speed` the same way."""
    from core.audio import read_audio
    from core.inference import CodecVocoder
    from core.speech.codec import fit_codec
    from core.speech.stream import ChunkedVocoder, ChunkPlan
    from tests.data_helpers import make_espeak_dataset

    manifest = make_espeak_dataset(tmp_path / "espeak", per_language=8)
    clips = sorted((manifest.parent / "audio").glob("*.wav"))
    codec = fit_codec(clips[:12], codebook_size=128, hop_length=HOP, iterations=20)
    for clip in clips[12:15]:
        codes = codec.encode(read_audio(clip, 16000)[0]).tolist()
        for speed in (1.0, 1.5):
            vocoder = CodecVocoder(codec, speed)
            whole = ChunkedVocoder(vocoder, None, codec.frame_rate)
            for code in codes:
                assert whole.add(code) == []
            [reference] = whole.finish()
            chunker = ChunkedVocoder(CodecVocoder(codec, speed), ChunkPlan(), codec.frame_rate)
            chunks = [chunk for code in codes for chunk in chunker.add(code)] + chunker.finish()
            streamed = torch.cat(chunks)
            assert len(chunks) >= 2 and streamed.numel() == reference.numel() == vocoder.total_samples(len(codes))
            assert mcd_dtw(streamed, reference) <= OWN_TOLERANCE_DB
            if speed == 1.0:
                assert torch.equal(reference, codec.decode(torch.tensor(codes)))


def _streamed_and_whole(server: ServerProcess, model: str, text: str, **extra: Any) -> tuple[np.ndarray, np.ndarray, int,
                                                                                         list[dict]]:
    """Return (streamed samples, whole samples, rate, the SSE events: the deltas, then done) of one text (greedy: the
    same tokens)."""
    body = {"model": model, "input": text, "voice": "anna", **extra}
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json={**body, "stream_format": "sse"}, timeout=600) as answer:
        assert answer.status_code == 200, answer.read()
        events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
    streamed, rate = sf.read(io.BytesIO(b"".join(base64.b64decode(e["audio"]) for e in events[:-1])), dtype="float32")
    whole = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=600)
    reference, _ = sf.read(io.BytesIO(whole.content), dtype="float32")
    assert len(events) >= 3, "the stream came in one chunk: the text is too short to test the joins"
    return streamed, reference, rate, events


def _at_16k(samples: np.ndarray, rate: int) -> torch.Tensor:
    import torchaudio

    return torchaudio.functional.resample(torch.from_numpy(samples), rate, 16000)


# Turbo's reduced GPT-2 makes its tokens fast: at 1.2 s (30 tokens) the last came before a client leaving after the
# first chunk reached the server (CI, once); at 2.4 s the second chunk is vocoded between them.
@pytest.mark.slow
@pytest.mark.parametrize(("server_of", "extra_tokens", "tolerance_db", "max_seconds"), [
    (chatterbox_server, -1, CHATTERBOX_TOLERANCE_DB, 1.2),  # the published generate trims the last token
    (turbo_server, 3, TURBO_TOLERANCE_DB, 2.4),             # generate() appends three silence tokens, trims nothing
], ids=["chatterbox", "chatterbox-turbo"])
def test_a_t3_checkpoint_streams_within_the_tolerance(tmp_path: Path, server_of: Callable[..., Any], extra_tokens: int,
                                                       tolerance_db: float, max_seconds: float) -> None:
    """The reduced T3 extended to Amharic with the full published S3Gen (random weights; 2 flow steps, Turbo's
    meanflow S3Gen its own 2), greedy: the streamed answer has the whole one's length, (tokens + extra) × 960
    samples, and agrees with it within the family's tolerance; a client that leaves after the first audio
    stops the generation."""
    from core.data.sample_text import AMHARIC_SENTENCES

    with server_of(tmp_path / "workspace", max_seconds=max_seconds).run() as server:
        streamed, whole, rate, events = _streamed_and_whole(server, "t3_am", AMHARIC_SENTENCES[1])
        tokens = events[-1]["usage"]["output_tokens"]
        assert rate == 24000 and len(streamed) == len(whole) == (tokens + extra_tokens) * 960
        difference = mcd_dtw(_at_16k(streamed, rate), _at_16k(whole, rate))
        print(f"\n{tokens} tokens: streamed vs whole MCD-DTW {difference:.3f} dB")
        assert difference <= tolerance_db
        before = _health(server)
        with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=600,
                          json={"model": "t3_am", "input": AMHARIC_SENTENCES[1], "voice": "anna", "stream_format": "audio"}) as answer:
            next(answer.iter_bytes())
        _wait(lambda: _health(server)["speaking"] == 0, 120, "generation stopped")
        after = _health(server)
        assert after["stopped"] == before["stopped"] + 1 and after["speech_tokens"] - before["speech_tokens"] < tokens


@pytest.mark.slow
def test_an_indextts_gpt_streams_within_the_tolerance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The reduced IndexTTS2 speech folder (random weights; BigVGAN's last layer scaled by 1e-3, as a random
    BigVGAN otherwise clips every sample at ±1 and leaves nothing to compare), greedy: the streamed answer has
    the whole one's length, int(codes × 1.72) × 256 samples, and agrees with it within INDEXTTS_TOLERANCE_DB.
    `synthesize --stream` writes the same speech through the family's stream into a wav that grew chunk by chunk."""
    from core.cli import main

    served = indextts_server(tmp_path / "workspace", max_seconds=1.2, audible=True)
    with served.run() as server:
        streamed, whole, rate, events = _streamed_and_whole(server, "gpt", "HELLO THERE")
        codes = events[-1]["usage"]["output_tokens"]
        assert rate == 22050 and len(streamed) == len(whole) == int(codes * 1.72) * 256
        assert 0.0 < np.abs(whole).max() < 1.0  # not clipped: the comparison can fail
        assert mcd_dtw(_at_16k(streamed, rate), _at_16k(whole, rate)) <= INDEXTTS_TOLERANCE_DB
    for name, value in {**served.env, "LINGUAFORGE_WORKSPACE": str(served.workspace)}.items():
        monkeypatch.setenv(name, value)
    output = served.workspace / "outputs" / "streamed.wav"
    argv = ["synthesize", "--family", "indextts", "--checkpoint", str(served.checkpoint), "--tokenizer",
            str(served.checkpoint.parent / "bpe.model"), "--reference", str(served.workspace / "voices" / "anna.wav"),
            "--text", "HELLO THERE", "--output", str(output), "--max-new-tokens", str(codes), "--temperature", "0",
            "--option", "diffusion_steps=2", "--stream", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["chunks"] >= 2 and 0 < report["first_audio_s"] < report["synthesis_s"]
    written, _ = sf.read(str(output), dtype="float32")
    assert len(written) == len(streamed) and not output.with_name("streamed.wav.part").exists()
    assert mcd_dtw(_at_16k(written, rate), _at_16k(streamed, rate)) <= INDEXTTS_TOLERANCE_DB


@pytest.mark.slow  # the reduced CSM workspace and the server's start: about 80 s on a loaded 2-core machine
def test_a_csm_checkpoint_streams_mimi_frame_by_frame_while_it_generates(tmp_path: Path) -> None:
    """The reduced CSM + Mimi folder (random weights) with its checkpoint grown to Amharic, greedy, 10 s a request
    (125 frames; untrained, it never makes the eos frame): the SSE stream is a 24 kHz wav in 125 chunks, one per
    frame as it is generated (1,920 samples each: Mimi decodes frame by frame, no window, lookahead or
    cross-fade), and it is the whole answer's samples (at most one 16-bit step apart). The first audio reaches the
    client while the engine is still speaking, and a client that leaves then stops the generation short of the
    frames."""
    from core.data.sample_text import AMHARIC_SENTENCES

    with csm_server(tmp_path / "workspace", max_seconds=10.0).run() as server:
        streamed, whole, rate, events = _streamed_and_whole(server, "csm_am", AMHARIC_SENTENCES[1])
        frames = events[-1]["usage"]["output_tokens"]
        assert rate == 24000 and frames == 125 and len(streamed) == len(whole) == frames * 1920
        assert [e["type"] for e in events] == ["speech.audio.delta"] * frames + ["speech.audio.done"]
        assert {len(base64.b64decode(e["audio"])) for e in events[1:-1]} == {1920 * 2}  # 16-bit samples of one frame
        assert np.abs(whole).max() > 0.01  # Mimi's audio, not silence: the comparison can fail
        difference = float(np.abs(streamed - whole).max())
        print(f"\n{frames} frames: streamed vs whole, largest sample difference {difference:.3g}")
        assert difference <= CSM_TOLERANCE
        before = _health(server)
        with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=600, json={
                "model": "csm_am", "input": AMHARIC_SENTENCES[1], "voice": "anna", "stream_format": "audio"}) as answer:
            assert answer.status_code == 200 and answer.headers["x-sample-rate"] == "24000"
            audio = answer.iter_bytes()  # kept: a generator dropped here would close the connection at once
            first = next(audio)
            assert first[:4] == b"RIFF" and _health(server)["speaking"] == 1  # the audio left before the frames ended
        _wait(lambda: _health(server)["speaking"] == 0, 120, "generation stopped")
        after = _health(server)
        assert after["stopped"] == before["stopped"] + 1 and 0 < after["speech_tokens"] - before["speech_tokens"] < frames
