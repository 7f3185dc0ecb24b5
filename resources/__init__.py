"""Icons, themes and the paper catalogue: data files shipped with Studio (no code)."""
