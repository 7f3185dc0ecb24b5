"""Studio's Qt shell: the main window, the bridge to the engine, runs, undo and export.

Nothing here imports torch: models run in the engine process (see ARCHITECTURE.md).
"""
