"""The dashboard (an entry point): `ui.py` assembles one module per tab (`tabs/`), `server.py` serves it
with the TensorBoard proxy and the login, `common.py` holds what every tab shares. It may import the
library and talks to the job runner through one door, `runner.py`, the only module here importing `jobs`.
"""
