"""The HTTP speech server (`python -m core serve`): one checkpoint of any family behind OpenAI's speech route.

`engine.py` loads the checkpoint once and speaks batches of requests; `batching.py` is the bounded
queue and its worker thread; `voices.py` the voices folder; `app.py` the FastAPI routes.
"""
