"""Runs the ``streammom`` command line as a user does: a real process, in ``cwd``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, cwd: Path, prelude: str = "",
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``streammom *args`` in a fresh interpreter; ``prelude`` is Python run before it (to
    patch the environment the command sees)."""
    code = f"{prelude}\nimport sys\nsys.argv = ['streammom', *{list(args)!r}]\n" \
           "from service.cli import main\nmain()\n"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
