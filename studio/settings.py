"""The user's preferences, kept in QSettings: workspace, device, cluster, theme, recent files,
and the readers' resource budgets (``STUDIO_MAX_*``, exported to this process's environment so
the GUI's own readers and the engine it starts both use them)."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings

THEMES = ("dark", "light")
DEVICES = ("auto", "cpu", "cuda")
MAX_RECENT_FILES = 10
# Budgets the shell set when the app started win over stored ones (and are shown as such).
SHELL_BUDGETS = frozenset(name for name in os.environ if name.startswith("STUDIO_MAX_"))


class Settings:
    """Typed access to one QSettings store (tests pass an ini file of their own)."""

    def __init__(self, store: QSettings | None = None) -> None:
        self.store = store if store is not None else QSettings()
        self.export_budgets()

    def _get(self, key: str, default: str) -> str:
        value = self.store.value(key, default)
        return default if value is None else str(value)

    # -- preferences -------------------------------------------------------------------------
    @property
    def workspace(self) -> Path:
        """The chosen folder, else ``$STUDIO_WORKSPACE``, else the user data folder."""
        from engine.workspace import default_workspace

        chosen = self._get("workspace", "")
        return Path(chosen).expanduser() if chosen else default_workspace()

    @workspace.setter
    def workspace(self, folder: str | os.PathLike) -> None:
        self.store.setValue("workspace", str(folder))

    @property
    def device(self) -> str:
        device = self._get("engine/device", "auto")
        return device if device in DEVICES else "auto"

    @device.setter
    def device(self, device: str) -> None:
        self.store.setValue("engine/device", device)

    @property
    def cluster(self) -> str:
        """Default cluster address (``local``, ``auto``, ``host:port``, ``ray://...``)."""
        return self._get("engine/cluster", "local")

    @cluster.setter
    def cluster(self, address: str) -> None:
        self.store.setValue("engine/cluster", address.strip() or "local")

    @property
    def theme(self) -> str:
        theme = self._get("appearance/theme", "dark")
        return theme if theme in THEMES else "dark"

    @theme.setter
    def theme(self, theme: str) -> None:
        self.store.setValue("appearance/theme", theme)

    # -- reader budgets ------------------------------------------------------------------------
    def budgets(self) -> dict[str, float]:
        """Stored budgets by environment variable (only those the user changed)."""
        from engine.io.limits import BUDGETS

        stored = {}
        for budget in BUDGETS:
            try:
                value = float(self.store.value(f"budgets/{budget.env}", 0) or 0)
            except (TypeError, ValueError):
                continue
            if value > 0:
                stored[budget.env] = value
        return stored

    def set_budgets(self, values: dict[str, float]) -> None:
        """Store ``values`` (a value equal to the default is forgotten) and export them."""
        from engine.io.limits import BUDGETS

        for budget in BUDGETS:
            value = values.get(budget.env)
            if value is None or value == budget.default:
                self.store.remove(f"budgets/{budget.env}")
                if budget.env not in SHELL_BUDGETS:
                    os.environ.pop(budget.env, None)
            else:
                self.store.setValue(f"budgets/{budget.env}", value)
        self.export_budgets()

    def export_budgets(self) -> None:
        """Put the stored budgets into this process's environment (the engine started from
        it inherits them); a budget set in the shell is left as the shell set it."""
        for name, value in self.budgets().items():
            if name not in SHELL_BUDGETS:
                os.environ[name] = str(int(value)) if value.is_integer() else str(value)

    # -- recent files ------------------------------------------------------------------------
    def recent_files(self) -> list[str]:
        value = self.store.value("recent/files", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or []) if v]

    def add_recent_file(self, path: str | os.PathLike) -> list[str]:
        path = str(Path(path).resolve())
        files = [path] + [f for f in self.recent_files() if f != path]
        files = files[:MAX_RECENT_FILES]
        self.store.setValue("recent/files", files)
        return files

    def clear_recent_files(self) -> None:
        self.store.setValue("recent/files", [])

    # -- window layout -----------------------------------------------------------------------
    def window_state(self) -> tuple[QByteArray | None, QByteArray | None]:
        return self.store.value("window/geometry"), self.store.value("window/state")

    def save_window_state(self, geometry: QByteArray, state: QByteArray) -> None:
        self.store.setValue("window/geometry", geometry)
        self.store.setValue("window/state", state)

    def sync(self) -> None:
        self.store.sync()
