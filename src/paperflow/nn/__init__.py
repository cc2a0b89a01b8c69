"""Shared neural building blocks."""
