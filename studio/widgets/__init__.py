"""Widgets the shell and the panels both use (the shell never imports panel code)."""
