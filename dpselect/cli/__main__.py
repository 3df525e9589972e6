"""``python -m dpselect.cli``: the ``dpselect`` command."""
from dpselect.cli.command import console_main

if __name__ == "__main__":  # pragma: no cover
    console_main()
