"""The command line (``main``) and ``doctor``. Importing this folder imports no torch, so that
``python -m grpo_lab`` can catch a Ctrl-C while torch is still loading."""

import os
import signal
import sys


def _interrupted_while_starting(signum, frame):
    # Exit here and now: an exception raised inside an import can be caught and re-worded by the library being
    # imported (transformers turns it into an import error), and nothing has been written yet.
    sys.stderr.write("python -m grpo_lab: interrupted while starting; nothing was written\n")
    sys.stderr.flush()
    os._exit(130)


def catch_interrupt_while_starting() -> None:
    """Ctrl-C while torch is still importing (seconds): one line, not a traceback."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
