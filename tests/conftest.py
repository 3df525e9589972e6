"""Test-suite settings. The deterministic test RNG is allowed here, and only here."""
import os

os.environ.setdefault("DPSELECT_ALLOW_INSECURE_RNG", "1")
