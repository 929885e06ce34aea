"""The command line (``main``) and ``doctor``. Importing this folder imports no torch, so that
``python -m grpo_lab`` can catch a Ctrl-C while torch is still loading."""

import signal
import sys


def _interrupted_while_starting(signum, frame):
    sys.stderr.write("python -m grpo_lab: interrupted while starting; nothing was written\n")
    raise SystemExit(130)


def catch_interrupt_while_starting() -> None:
    """Ctrl-C while torch is still importing (seconds): one line, not a traceback."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
