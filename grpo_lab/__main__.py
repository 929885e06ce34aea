"""``python -m grpo_lab``: the command line lives in ``grpo_lab.cli.main``."""

import sys

from .cli import catch_interrupt_while_starting

if __name__ == "__main__":
    catch_interrupt_while_starting()
    from .cli.main import main  # imports torch: after the Ctrl-C handler

    sys.exit(main())
