"""Modules that only mypy reads: structural conformance of the stores to their Protocols."""
