"""LinguaForge core library: tokenizers, checkpoints, datasets, training, inference, the doctor.

The foundation modules here (errors, config, fsutil, tables, progress, audio, text, checkpoint,
inference) and the sub-packages by concern (tokenizers, data, speech, training, eval, checks,
families) import only `models` and each other, never the command line (`core.cli`), the job
runner (`jobs`), the journeys, Gradio or Huey; `tests/test_layers.py` holds this. The CLI
(`python -m core`, in `core/cli/`), the job runner and the dashboard are layers above it.
"""

__version__ = "0.1.0"
