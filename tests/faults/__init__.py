"""Fault tests: real worker processes against private services a test may stop and restart."""
