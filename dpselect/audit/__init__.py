"""Audit dpselect's privacy claims on your own configuration (docs/privacy/audit.md).

Two kinds of evidence, and a look at side channels:

* :func:`certificate`: re-verify, in exact rational arithmetic, the table or noise that actually
  runs (read from the built strategy object) against the DP inequalities, and report the slack;
* :func:`empirical`: run the real entry points on neighbouring inputs many times and bound ε
  from below with exact Clopper–Pearson intervals; a bound above the claimed ε refutes the claim;
* :func:`side_channels`: random bytes consumed and output schemas on neighbouring inputs.

:func:`run_all` audits every shipped mechanism at a few (ε, δ, κ) points (``quick=True`` is what
CI runs); :func:`main` is ``dpselect audit``. Every result prints as a short report and has
``as_dict()``.
"""
from dpselect.audit._targets import MECHANISMS
from dpselect.audit.certify import certificate
from dpselect.audit.empirical import SCENARIOS, empirical
from dpselect.audit.results import (
    AuditReport,
    Certificate,
    Check,
    ConsumptionComparison,
    EmpiricalAudit,
    EventEstimate,
    SchemaComparison,
    SideChannelAudit,
)
from dpselect.audit.runner import main, run_all
from dpselect.audit.side_channels import bytes_consumed, side_channels

__all__ = [
    "MECHANISMS",
    "SCENARIOS",
    "certificate",
    "empirical",
    "side_channels",
    "bytes_consumed",
    "run_all",
    "main",
    "AuditReport",
    "Certificate",
    "Check",
    "EmpiricalAudit",
    "EventEstimate",
    "SideChannelAudit",
    "ConsumptionComparison",
    "SchemaComparison",
]
