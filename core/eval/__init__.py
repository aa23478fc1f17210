"""Evaluation: objective distances between recordings, the PocketSphinx intelligibility judge, the
quality judge (`quality/`: failure detectors, speaker similarity, MOS estimate, the `eval.asr` hook) and
the `eval tts` procedure over a checkpoint. Imports the core foundation (checkpoints, inference,
the run folder), `core.data` and `core.families` (a family checkpoint speaks through its family's
Speaker), never `core.training`: a caller that knows the run (the trainer, `eval tts`) passes its
model folder."""
