"""Tests of the Qt shell (``studio/``)."""
