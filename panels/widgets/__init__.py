"""Widgets only panels share: artifact viewers, job outputs, drops, GL, token text, command
boundaries. What the shell also uses (plot specs, parameter forms, figure export, claims) lives
in ``studio.widgets``, so the shell never imports panel code.

Import the module you need; this package imports nothing so that loading one widget does not
pull in the others.
"""
