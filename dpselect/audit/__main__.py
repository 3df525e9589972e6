"""``python -m dpselect.audit``: the same as ``dpselect audit``."""
from dpselect.audit.runner import main

raise SystemExit(main())
