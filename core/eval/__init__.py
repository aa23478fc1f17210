"""Evaluation: objective distances between recordings, the PocketSphinx intelligibility judge, and
the `eval tts` procedure over a checkpoint. Imports the core foundation, `core.data`,
`core.speech` and `core.inference`."""
