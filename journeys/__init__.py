"""Journeys: multi-stage flows that chain jobs (the TTS and LM quickstarts and their report).

A journey sits above the job runner and below the entry points: it may import `core`, `models`
and `jobs`, never `core.cli`, `gradio_app` or `app`; the entry point hands it the job catalogue.
"""
