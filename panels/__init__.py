"""Domain panels: one folder each, registered through the ``studio.panels`` entry-point group."""
