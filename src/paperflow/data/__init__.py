"""Loaders of real data (shared/DATA.md) and derived sets."""
