"""CDR numbering of antibody chains with ANARCI (IMGT, Kabat or Chothia).

ANARCI aligns each chain to its hidden Markov models with HMMER's ``hmmscan`` (a subprocess),
so numbering runs on a worker thread and needs the ``hmmer`` package installed; without it the
panel says so and everything else keeps working. Every residue of a numbered chain gets its
scheme number (``111A`` with an insertion code) and its region: ``CDR1``, ``CDR2``, ``CDR3``,
or ``""`` for the framework and anything outside the variable domain.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

SCHEMES = ("imgt", "kabat", "chothia")
SCHEME_TITLES = {"imgt": "IMGT", "kabat": "Kabat", "chothia": "Chothia"}
CDRS = ("CDR1", "CDR2", "CDR3")
# CDR boundaries (inclusive, in each scheme's own numbers; insertions fall inside).
# IMGT defines them alike for both chains; Kabat and Chothia differ between heavy and light.
CDR_RANGES = {
    "imgt": {"H": ((27, 38), (56, 65), (105, 117)), "L": ((27, 38), (56, 65), (105, 117))},
    "kabat": {"H": ((31, 35), (50, 65), (95, 102)), "L": ((24, 34), (50, 56), (89, 97))},
    "chothia": {"H": ((26, 32), (52, 56), (95, 102)), "L": ((24, 34), (50, 56), (89, 97))},
}
MISSING_HMMER = "install hmmer for CDR numbering (ANARCI runs its hmmscan program)"
MISSING_ANARCI = "install anarci for CDR numbering"
AMINO_ACIDS = frozenset("ACDEFGHIKLMNPQRSTVWYX")  # what hmmscan reads (a gap fails the batch)
NUMBERING_LIMIT = 5000  # chains numbered per set (hmmscan takes about 10 ms a chain)


@dataclass
class Numbering:
    """One chain's numbering: per residue of the sequence, its scheme label and region."""

    chain_type: str  # ANARCI's: H heavy, K kappa, L lambda
    scheme: str
    labels: list[str]  # "27", "111A"; "" outside the variable domain
    regions: list[str]  # "CDR1", "CDR2", "CDR3" or ""

    def cdr(self, sequence: str, name: str) -> str:
        """The residues of one CDR (``""`` when the chain has none numbered there)."""
        return "".join(letter for letter, region in zip(sequence, self.regions, strict=True)
                       if region == name)

    @property
    def chain(self) -> str:
        return "heavy" if self.chain_type == "H" else "light"


def numbering_problem() -> str | None:
    """Why numbering cannot run here (``None`` when it can)."""
    if shutil.which("hmmscan") is None:
        return MISSING_HMMER
    try:
        import anarci  # noqa: F401
    except ImportError:
        return MISSING_ANARCI
    return None


def region_of(number: int, chain_type: str, scheme: str) -> str:
    """``CDR1``..``CDR3`` or ``""`` for a residue numbered ``number`` in ``scheme``."""
    ranges = CDR_RANGES[scheme]["H" if chain_type == "H" else "L"]
    return next((name for name, (first, last) in zip(CDRS, ranges, strict=True)
                 if first <= number <= last), "")


def number_sequences(sequences: list[tuple[str, str]], scheme: str = "imgt"
                     ) -> list[Numbering | None]:
    """Number each ``(name, sequence)``; ``None`` for a chain ANARCI does not recognise as an
    antibody variable domain. Runs ``hmmscan``: call it off the GUI thread."""
    if scheme not in SCHEMES:
        raise ValueError(f"numbering scheme must be one of {SCHEMES}, not {scheme!r}")
    problem = numbering_problem()
    if problem:
        raise RuntimeError(problem)
    from anarci import anarci

    for _, sequence in sequences:  # gaps, stops and empty chains are no antibody domain
        if not sequence or not set(sequence) <= AMINO_ACIDS:
            _numbered[scheme, sequence] = None
    new = list(dict.fromkeys(s for _, s in sequences if (scheme, s) not in _numbered))
    if new:
        numbered, alignments, _ = anarci([(f"s{i}", s) for i, s in enumerate(new)],
                                         scheme=scheme, output=False)
        for sequence, domains, details in zip(new, numbered, alignments, strict=True):
            _numbered[scheme, sequence] = _numbering(sequence, domains, details, scheme)
    return [_numbered[scheme, s] for _, s in sequences]


_numbered: dict[tuple[str, str], Numbering | None] = {}  # (scheme, sequence): hmmscan once


def _numbering(sequence: str, domains, details, scheme: str) -> Numbering | None:
    """ANARCI's per-domain alignment as one label and region per residue."""
    if not domains:
        return None
    labels, regions = [""] * len(sequence), [""] * len(sequence)
    for (positions, start, _end), detail in zip(domains, details, strict=True):
        at = start
        for (number, insertion), letter in positions:
            if letter == "-":
                continue
            labels[at] = f"{number}{insertion.strip()}"
            regions[at] = region_of(number, detail["chain_type"], scheme)
            at += 1
    return Numbering(details[0]["chain_type"], scheme, labels, regions)
