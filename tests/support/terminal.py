"""Run a command with its stderr on a pseudo-terminal, as a person watching it would."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import time


def on_a_terminal(argv: list[str], *, env: dict | None = None, cwd: str | None = None,
                  timeout: float = 120) -> tuple[int, str]:
    """(exit status, everything written to the terminal) of ``argv`` run with stderr on a pty
    and stdout discarded."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=secondary, env=env, cwd=cwd)
    os.close(secondary)
    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([primary], [], [], 1.0)[0]:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=10)
    os.close(primary)
    return proc.returncode, seen.decode(errors="replace")
