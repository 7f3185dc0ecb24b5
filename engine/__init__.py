"""Studio's headless engine: methods, jobs, workspace and the protocol. Never imports Qt."""

__version__ = "0.1.0"
