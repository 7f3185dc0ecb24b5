"""Crowds without torch: a social-force simulation fitted to real tracks, crowd statistics, and
a coarse renderer (RGB, depth, silhouettes along a camera path) for the C2R method and panel."""
