"""LinguaForge core library: tokenizers, checkpoints, datasets, training, inference.

Everything here is importable without Gradio or Huey; the CLI (`python -m core`), the job
queue (`jobs/`) and the dashboard (`gradio_app/`) are thin layers over these modules.
"""

__version__ = "0.1.0"
