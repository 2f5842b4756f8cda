"""Placeholder: this package is being built; nothing is public yet."""
