"""Torch model code at the bottom of the house plan: the GPT backbone (`gpt.py`), the TTS model
(`tts.py`), the language model (`lm.py`), the frozen/trainable text-row split (`rows.py`) and the
model registry (`registry.py`). It imports torch only, never `core` or anything above it.
"""
