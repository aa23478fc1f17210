"""The chatterbox model family: its family class (`family.py`) and the modules it is built from."""
