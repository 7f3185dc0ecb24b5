"""Panels found through the ``studio.panels`` entry-point group, loaded on first use.

Discovery imports each registered module for its ``MANIFEST`` (a Qt-free
``panels.api.PanelManifest``); the widget factory (``"module:callable"``) is imported only when
the panel is first opened, so start-up does not pay for panels nobody opens. A panel that is
missing or broken becomes a message, never a crash.
"""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("studio.panels")

GROUP = "studio.panels"


class PanelUnavailable(Exception):
    """A panel that cannot be opened; the message says which and why."""


@dataclass(frozen=True)
class PanelEntry:
    id: str
    module: str
    manifest: Any = None        # panels.api.PanelManifest, or None when it failed to load
    error: str = ""

    @property
    def title(self) -> str:
        return self.manifest.title if self.manifest is not None else self.id


class PanelRegistry:
    def __init__(self, group: str = GROUP) -> None:
        self.group = group
        self._entries: dict[str, PanelEntry] | None = None
        self._lock = threading.Lock()  # discovery may run in the prewarming thread

    def entries(self) -> dict[str, PanelEntry]:
        """Every registered panel by id (discovered once)."""
        with self._lock:
            if self._entries is None:
                from importlib.metadata import entry_points  # ~50 ms: not at start-up

                found: dict[str, PanelEntry] = {}
                for ep in sorted(entry_points(group=self.group), key=lambda ep: ep.name):
                    entry = _load_manifest(ep.name, ep.value)
                    found[entry.id] = entry
                self._entries = found
            return self._entries

    def add(self, panel_id: str, manifest: Any, module: str = "") -> None:
        """Register a panel without an entry point (tests, plugins loaded at run time)."""
        self.entries()[panel_id] = PanelEntry(panel_id, module or manifest.factory, manifest)

    def get(self, panel_id: str) -> PanelEntry | None:
        return self.entries().get(panel_id)

    def for_format(self, format_name: str, preferred: str = "") -> PanelEntry | None:
        """The panel that opens a format: the format's own choice first, else any claimant."""
        entries = self.entries()
        chosen = entries.get(preferred)
        if chosen is not None and chosen.manifest is not None:
            return chosen
        for entry in entries.values():
            if entry.manifest is not None and format_name in entry.manifest.formats:
                return entry
        return None

    def for_file(self, path) -> PanelEntry | None:
        """The panel that opens a file or folder: its format found by content, then that
        format's panel (File > Open, drops, the runs dock and the lab share this rule)."""
        from engine.io import FormatError, detect

        try:
            fmt = detect(path)
        except (FormatError, OSError):
            return None
        return self.for_format(fmt.name, fmt.panel)

    def factory_modules(self) -> list[str]:
        """The modules of every loaded panel's widget factory (to import ahead of use)."""
        return [entry.manifest.factory.partition(":")[0] for entry in self.entries().values()
                if entry.manifest is not None]

    def create(self, panel_id: str, host: Any):
        """Import the panel's factory and build its widget: ``factory(host) -> QWidget``."""
        entry = self.get(panel_id)
        if entry is None:
            raise PanelUnavailable(f"no panel {panel_id!r} is installed")
        if entry.manifest is None:
            raise PanelUnavailable(f"the {panel_id} panel did not load: {entry.error}")
        target = entry.manifest.factory
        module_name, _, attribute = target.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attribute or "create")
        except ModuleNotFoundError as exc:
            raise PanelUnavailable(f"the {entry.title} panel is not built yet "
                                   f"({exc.name} is missing)") from None
        except (ImportError, AttributeError) as exc:
            raise PanelUnavailable(f"the {entry.title} panel failed to load its widget "
                                   f"{target}: {exc}") from None
        return factory(host)


def _load_manifest(name: str, module_name: str) -> PanelEntry:
    try:
        module = importlib.import_module(module_name)
        manifest = module.MANIFEST
    except ModuleNotFoundError as exc:
        log.warning("panel %s: module %s is missing (%s)", name, module_name, exc)
        return PanelEntry(name, module_name, error=f"{module_name} is not installed")
    except AttributeError:
        log.warning("panel %s: %s has no MANIFEST", name, module_name)
        return PanelEntry(name, module_name, error=f"{module_name} declares no MANIFEST yet")
    except Exception as exc:  # a broken third-party panel must not stop the shell
        log.exception("panel %s failed to load", name)
        return PanelEntry(name, module_name, error=f"{type(exc).__name__}: {exc}")
    return PanelEntry(manifest.id or name, module_name, manifest)
