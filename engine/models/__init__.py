"""One readable file per model (config dataclass + module), nanoGPT style. Imports torch."""
