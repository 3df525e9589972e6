"""Audit dpselect's privacy claims on your own configuration (docs/privacy/audit.md)."""
from dpselect.audit.certify import certificate

__all__ = ["certificate"]
