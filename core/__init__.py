"""LinguaForge core library: tokenizers, checkpoints, datasets, training, inference, the doctor.

The foundation modules here (errors, config, paths, confine, fsutil, tables, progress, processes,
audio, text, checkpoint, inference, the run folder, the workspace file lists, the TensorBoard
process) and the sub-packages by concern (tokenizers, data, speech, training, eval, checks,
families) import only `models` and each other, never the command line (`core.cli`), the job
runner (`jobs`), the journeys, Gradio or Huey, and no two of them import each other in a circle
(but for the family edges `tests/test_layers.py` lists as known); that test holds this. The CLI (`python -m core`, in `core/cli/`), the job runner and
the dashboard are layers above it.
"""

__version__ = "0.1.0"
