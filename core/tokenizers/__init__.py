"""Tokenizers: one interface over SentencePiece and HF `tokenizers` files, training, extension
(SentencePiece `extend`, HF BPE `merge`), measurement (inspect, sweep, drift), corpora, and the
vocabulary contract between a base tokenizer and its extension (prefix check, fingerprints).
Imports only the core foundation (`core.errors`, `core.config`, `core.fsutil`, `core.text`)."""
