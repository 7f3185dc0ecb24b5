"""Widgets every panel shares: plot specs, parameter forms, artifact viewers, claims.

Import the module you need (``panels.widgets.plot_view``); this package imports nothing so
that loading one widget does not pull in the others (pyqtgraph is only loaded by the views
that draw).
"""
