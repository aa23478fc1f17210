"""The quality judge: what a careful listener would notice in a checkpoint's evaluation outputs.

- `detectors`: failure detectors over speech tokens, texts and DTW distances (no stop, length out
  of range, loops, prompt copying, text ignored), each a number, a threshold and a flag;
- `listeners`: speaker similarity (Resemblyzer's VoiceEncoder) and a MOS estimate (DNSMOS);
- `asr_hook`: a user ASR (a Python callable or a command) scored by character error rate;
- `report`: the quality report of one evaluated checkpoint and the best-checkpoint score.
"""
