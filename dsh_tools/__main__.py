"""``python -m dsh_tools``: the ``dsh-tools`` command, for environments without the script."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
