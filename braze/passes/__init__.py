"""Kernel IR passes."""
