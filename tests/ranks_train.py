"""`python -m core train --config C --json` for each config named, one after another in one process.

Under torchrun (`-m tests.ranks_train C1 C2`) the runs share one start of the ranks and one process
group: the DDP tests' way to pay the ranks' start (imports, the process group) once per family
instead of once per run. Exits with the first failing run's code.
"""

from __future__ import annotations

import sys

from core.cli import main

if __name__ == "__main__":
    for config in sys.argv[1:]:
        code = main(["train", "--config", config, "--json"])
        if code:
            sys.exit(code)
