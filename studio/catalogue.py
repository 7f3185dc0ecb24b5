"""The welcome page's catalogue of the nineteen papers: static data, read without the engine."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from studio.paths import resource

AVAILABLE, COMING = "available", "coming"


@dataclass(frozen=True)
class Paper:
    slug: str
    title: str
    one_line: str
    panel: str                  # panel id that hosts the paper ("lab", "fmri", ...)
    panel_title: str
    area: str
    status: str                 # "available" or "coming"
    coming: str                 # what the panel will offer, shown while it is "coming"
    methods: tuple[str, ...]    # method-id prefixes ("eos.")
    arxiv: str = ""

    @property
    def available(self) -> bool:
        return self.status == AVAILABLE


class CatalogueError(Exception):
    """The catalogue file is missing or malformed; the message names the file."""


@cache
def load_catalogue(path: Path | None = None) -> tuple[Paper, ...]:
    path = path or resource("catalogue.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        panels = data["panels"]
        return tuple(
            Paper(slug=item["slug"], title=item["title"], one_line=item["one_line"],
                  panel=item["panel"], panel_title=panels.get(item["panel"], item["panel"]),
                  area=item.get("area", ""), status=item["status"],
                  coming=item.get("coming", ""), methods=tuple(item.get("methods", ())),
                  arxiv=item.get("arxiv", ""))
            for item in data["papers"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CatalogueError(f"{path}: not a readable catalogue ({exc})") from None


def paper(slug: str) -> Paper:
    for item in load_catalogue():
        if item.slug == slug:
            return item
    raise KeyError(f"no paper {slug!r} in the catalogue")
