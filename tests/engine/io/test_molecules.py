"""Molecule formats: SMILES lists and tables, SDF/MOL, XYZ, FASTA, PDB, mmCIF; bad records are
reported by line or record number while the good ones load; hostile files give clear errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from engine import io as registry
from engine.io import FormatError, molecules, tables
from engine.io.molecules import (
    DESCRIPTOR_NAMES,
    Molecule,
    Sequence,
    Structure,
    descriptors,
    frame_time,
    parse_smiles,
    read_molecules,
    read_xyz_frames,
    standardise,
)

SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
ANTIBIOTICS = SHARED / "data" / "molecules" / "GNEprop_known_abx.tsv"
ETHANOL_MOL = """ethanol
  made by hand

  3  2  0  0  0  0  0  0  0  0999 V2000
    0.0000    0.0000    0.0000 C   0  0  0  0  0  0  0  0  0  0  0  0
    1.5000    0.0000    0.0000 C   0  0  0  0  0  0  0  0  0  0  0  0
    2.0000    1.2000    0.0000 O   0  0  0  0  0  0  0  0  0  0  0  0
  1  2  1  0
  2  3  1  0
M  END
"""
PDB_LINES = [
    "HEADER    TEST PROTEIN                            01-JAN-00   1ABC",
    "ATOM      1  N   MET A   1      11.104  13.207   2.100  1.00 20.00           N",
    "ATOM      2  CA  MET A   1      12.560  13.207   2.100  1.00 21.00           C",
    "ATOM      3  CA  LYS A   2      15.400  13.207   2.100  1.00 22.00           C",
    "ATOM      4  CA  GLY B   1      18.200  13.207   2.100  1.00 23.00           C",
    "HETATM    5  O   HOH A 101      20.000  10.000   2.100  1.00 30.00           O",
]


@pytest.fixture
def with_molecule_formats(monkeypatch):
    """The registry as installed, whether or not this checkout's entry points are yet."""
    found = (*tables.FORMATS, *molecules.FORMATS)
    monkeypatch.setattr(registry, "all_formats", lambda: found)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# -- SMILES ------------------------------------------------------------------------------------

def test_smi_bad_lines_reported_with_numbers_and_good_ones_kept(tmp_path):
    path = write(tmp_path / "set.smi", "SMILES name\nCCO ethanol\nC1CC bad-ring\n\n"
                                       "c1ccccc1 benzene\nC(C)(C)(C)(C)C pentavalent\n")
    found = read_molecules(path)
    assert [m.smiles for m in found.molecules] == ["CCO", "c1ccccc1"]
    assert [m.name for m in found.molecules] == ["ethanol", "benzene"]
    assert [where for where, _ in found.problems] == ["line 3", "line 6"]
    assert "C1CC" in found.problems[0][1]


def test_csv_with_smiles_column_keeps_other_columns_as_properties(tmp_path):
    path = write(tmp_path / "set.csv", "id,SMILES,activity\nm1,OCC,0.5\nm2,xyz,1\nm3,C,\n")
    found = read_molecules(path)
    assert [(m.name, m.smiles, m.props) for m in found.molecules] == [
        ("m1", "CCO", {"activity": 0.5}), ("m3", "C", {})]
    assert found.problems[0][0] == "line 3"


def test_gzipped_tsv_and_missing_column(tmp_path):
    path = tmp_path / "set.tsv.gz"
    path.write_bytes(gzip.compress(b"smiles\tname\nCCN\tethylamine\n"))
    assert read_molecules(path).molecules[0].smiles == "CCN"
    with pytest.raises(FormatError, match="no SMILES column"):
        read_molecules(write(tmp_path / "other.csv", "a,b\n1,2\n"))


def test_antibiotics_reference_reads_whole():
    if not ANTIBIOTICS.exists():
        pytest.skip(f"{ANTIBIOTICS} is absent")
    found = read_molecules(ANTIBIOTICS)
    assert len(found.molecules) == 201 and not found.problems
    assert found.molecules[0].name == "Actinomycin D" and "Target" in found.molecules[0].props
    cleaned = {standardise(m.smiles) for m in found.molecules}
    assert 150 <= len(cleaned) <= 200  # salts split, stereo dropped, duplicates merged


# -- SDF / MOL, XYZ ----------------------------------------------------------------------------

def test_sdf_broken_block_reported_by_record_and_line(tmp_path):
    broken = ETHANOL_MOL.replace("  3  2  0", "  9  2  0")  # counts line lies
    truncated = ETHANOL_MOL.split("M  END")[0][:120]
    good = ETHANOL_MOL.replace("M  END\n", "M  END\n> <pIC50>\n6.5\n\n")
    path = write(tmp_path / "set.sdf", "$$$$\n".join([good, broken, good, truncated]))
    found = read_molecules(path)
    assert [m.smiles for m in found.molecules] == ["CCO", "CCO"]
    assert found.molecules[0].props == {"pIC50": 6.5} and found.molecules[0].name == "ethanol"
    where = [w for w, _ in found.problems]
    assert where == ["record 2 (line 15)", "record 4 (line 40)"]
    assert "M  END" in found.problems[1][1]


def test_binary_file_named_sdf_and_empty_file_are_clear_errors(tmp_path, with_molecule_formats):
    binary = tmp_path / "fake.sdf"
    binary.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(FormatError, match="fake.sdf: binary content"):
        registry.inspect_file(binary)
    with pytest.raises(FormatError, match="empty"):
        registry.inspect_file(write(tmp_path / "empty.smi", ""))
    with pytest.raises(FormatError, match="no readable valid SMILES .line 1"):
        read_molecules(write(tmp_path / "bad.smi", "not-a-smiles\n"))


def test_xyz_frames_get_bonds_and_a_truncated_frame_is_reported(tmp_path):
    water = "3\nwater\nO 0.0 0.0 0.0\nH 0.96 0.0 0.0\nH -0.24 0.93 0.0\n"
    path = write(tmp_path / "traj.xyz", water + water + "3\ncut\nO 0 0 0\n")
    found = read_molecules(path)
    assert [m.smiles for m in found.molecules] == ["O", "O"]
    assert found.molecules[0].coordinates[1] == ("H", 0.96, 0.0, 0.0)
    assert found.problems == [("line 14", "truncated frame: 3 atoms announced at line 11, "
                                          "1 present")]


# -- FASTA, PDB, mmCIF -------------------------------------------------------------------------

def test_fasta_reports_bad_letters_by_line(tmp_path):
    path = write(tmp_path / "abs.fasta", ">heavy\nEVQLVESGG\nGLVQ\n>bad\nEVQ12\n>dna\nACGTTG\n")
    found = read_molecules(path)
    assert [(s.name, s.sequence, s.kind) for s in found.records] == [
        ("heavy", "EVQLVESGGGLVQ", "protein"), ("dna", "ACGTTG", "nucleotide")]
    assert found.problems[0][0] == "line 5" and "'12'" in found.problems[0][1]


def test_pdb_atoms_chains_and_a_truncated_line(tmp_path):
    path = write(tmp_path / "small.pdb", "\n".join([*PDB_LINES, PDB_LINES[2][:40], "END"]))
    found = read_molecules(path)
    (structure,) = found.records
    assert isinstance(structure, Structure) and structure.name == "1ABC"
    assert len(structure.atoms) == 5 and structure.atoms[-1].hetero
    assert structure.chains == {"A": "MK", "B": "G"}
    assert structure.atoms[2].b_factor == 22.0 and structure.atoms[0].element == "N"
    assert found.problems[0][0] == "line 7" and "cut short" in found.problems[0][1]


def test_mmcif_through_gemmi(tmp_path):
    try:
        import gemmi
    except ImportError:  # mmCIF is optional: without gemmi the error says what to install
        with pytest.raises(FormatError, match="needs the 'gemmi' package"):
            read_molecules(write(tmp_path / "x.cif", "data_x\n"))
        return
    pdb = write(tmp_path / "small.pdb", "\n".join([*PDB_LINES, "END"]) + "\n")
    structure = gemmi.read_structure(str(pdb))
    structure.setup_entities()
    cif = tmp_path / "small.cif"
    structure.make_mmcif_document().write_file(str(cif))
    (read,) = read_molecules(cif).records
    assert read.chains == {"A": "MK", "B": "G"} and len(read.atoms) == 5
    with pytest.raises(FormatError, match="small_bad.cif"):
        read_molecules(write(tmp_path / "small_bad.cif", "data_x\nloop_\n_atom_site.id\n"))


# -- descriptors and the registry --------------------------------------------------------------

def test_descriptors_match_known_values_and_invalid_is_zero():
    aspirin = descriptors(parse_smiles("CC(=O)Oc1ccccc1C(=O)O"))
    assert set(aspirin) == set(DESCRIPTOR_NAMES)
    assert aspirin["MolWt"] == pytest.approx(180.16, abs=0.01)
    assert aspirin["HeavyAtoms"] == 13 and aspirin["AromaticRings"] == 1
    assert 1 < aspirin["SA"] < 3 and 0.5 < aspirin["QED"] < 0.6
    assert set(descriptors(parse_smiles("C1CC")).values()) == {0.0}


def test_standardise_splits_salts_drops_stereo_and_charges():
    assert standardise("C[C@H](N)C(=O)[O-].[Na+]") == "CC(N)C(=O)O"
    assert standardise("nonsense") is None


def test_detect_and_inspect_through_the_registry(tmp_path, with_molecule_formats):
    smiles_csv = write(tmp_path / "gen.csv", "smiles\nCCO\nC1CC\nCCO\n")
    plain_csv = write(tmp_path / "plain.csv", "a,b\n1,2\n")
    assert registry.detect(smiles_csv).name == "smiles"
    assert registry.detect(plain_csv).name == "csv"  # a table without SMILES stays a table
    report = registry.inspect_file(smiles_csv)
    assert report["panel"] == "molecules"
    assert report["summary"] == {"kind": "smiles", "records": 2, "invalid": 1, "unique": 1}
    assert report["metadata"]["problems"] == ["line 3: invalid SMILES 'C1CC'"]
    assert report["metadata"]["properties"]["HeavyAtoms"]["mean"] == 3
    for name, text in (("x.sdf", ETHANOL_MOL), ("x.fasta", ">a\nMK\n"),
                       ("x.pdb", "\n".join(PDB_LINES)), ("x.xyz", "1\n\nC 0 0 0\n")):
        assert registry.detect(write(tmp_path / name, text)).name == name.split(".")[1]
    pdb_report = registry.inspect_file(tmp_path / "x.pdb")
    assert pdb_report["summary"]["atoms"] == 5 and pdb_report["metadata"]["chains"] == {
        "A": 2, "B": 1}


def test_records_are_the_documented_types(tmp_path):
    assert isinstance(read_molecules(write(tmp_path / "a.smi", "C\n")).records[0], Molecule)
    assert isinstance(read_molecules(write(tmp_path / "a.fa", ">s\nMK\n")).records[0], Sequence)


def test_murcko_scaffolds_of_known_molecules():
    from engine.io.molecules import murcko_scaffold

    assert murcko_scaffold("CC(C)Cc1ccc(cc1)C(C)C(=O)O") == "c1ccccc1"  # ibuprofen: benzene
    assert murcko_scaffold("CC(=O)Nc1ccc(O)cc1") == "c1ccccc1"  # paracetamol
    # diphenhydramine keeps both rings and the linking carbon
    assert murcko_scaffold("CN(C)CCOC(c1ccccc1)c1ccccc1") == "c1ccc(Cc2ccccc2)cc1"
    assert murcko_scaffold("CCCCO") == "" and murcko_scaffold("C1CC") is None


def test_jain_antibodies_read_as_vh_and_vl_with_measured_properties():
    from engine.io.molecules import jain_properties, read_jain_antibodies

    directory = SHARED / "data" / "antibodies"
    if not directory.is_dir():
        pytest.skip("../shared/data/antibodies is absent")
    found = read_jain_antibodies(directory)
    assert len(found.records) == 2 * 137 and not found.problems
    first = found.records[0]
    assert first.name == "abituzumab VH" and first.sequence.startswith("QVQLQQSGGELAKPG")
    assert 112 <= len(first.sequence) <= 130 and found.records[1].name == "abituzumab VL"
    measured = jain_properties(directory)
    assert len(measured) == 137 and measured["abituzumab"]["Fab Tm by DSF"] == 75.5
    assert {"PSR", "AC-SINS", "HIC Retention Time"} <= set(measured["abrilumab"])
    with pytest.raises(FormatError, match="jain2017_sd02.csv"):
        read_jain_antibodies(directory.parent)


def test_moses_draws_are_the_same_valid_smiles_for_the_same_seed(monkeypatch):
    from engine.io.molecules import load_moses, moses_path

    assert moses_path().name == "train.csv.gz" and moses_path().is_file()
    drawn = load_moses(4, seed=0)
    assert drawn == [  # what kCGM pretrains on and Branching Flows embeds: keep the draw stable
        "N#Cc1cc(C2CC2)nc(N2CCN(c3ccccc3)CC2)n1", "CC(C)Oc1ccc(Cn2cnc3sccc3c2=O)cc1",
        "Cc1nc(-c2cccc(NC(=O)c3scnc3C3CC3)c2)n[nH]1", "Cc1cc(C)nc(SC(C)C(=O)Nc2nccs2)n1"]
    assert load_moses(4, seed=0) == drawn and load_moses(4, seed=7)[0] != drawn[0]
    assert all(parse_smiles(s) is not None for s in load_moses(50, seed=3))
    monkeypatch.setattr(molecules.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="molsets"):
        moses_path()


def test_a_generation_trajectory_is_inspected_as_frames(tmp_path, with_molecule_formats):
    frames = [("t=0.000", ["X 0 0 0"]), ("t=0.500", ["X 0 0 0", "X 2 0 0"]),
              ("t=1.000", ["O 0.0 0.0 0.0", "H 0.96 0.0 0.0", "H -0.24 0.93 0.0"])]
    text = "".join(f"{len(atoms)}\n{comment}\n" + "\n".join(atoms) + "\n"
                   for comment, atoms in frames)
    report = registry.inspect_file(write(tmp_path / "trajectory_0.xyz", text))
    assert report["summary"]["frames"] == 3 and report["summary"]["records"] == 1
    assert report["metadata"]["atoms_per_frame"] == {"min": 1, "max": 3}
    assert report["metadata"]["time"] == {"first": 0.0, "last": 1.0}
    noise = registry.inspect_file(write(tmp_path / "noise.xyz", "".join(
        f"{len(atoms)}\n{comment}\n" + "\n".join(atoms) + "\n" for comment, atoms in frames[:2])))
    assert noise["summary"]["frames"] == 2 and noise["summary"]["records"] == 0
    with pytest.raises(FormatError, match="no readable XYZ frame"):
        registry.inspect_file(write(tmp_path / "one.xyz", "1\n\nX 0 0 0\n"))
    frames_read, problems = read_xyz_frames(write(tmp_path / "cut.xyz", text + "2\nt=2\nO 0 0 0\n"))
    assert len(frames_read) == 3 and problems[0][1].startswith("truncated frame")
    assert frame_time("sample 3 t=0.25") == 0.25 and frame_time("sample 3") is None


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # MDAnalysis'
def test_md_topology_and_trajectory_are_detected_and_inspected(tmp_path, with_molecule_formats):
    from MDAnalysisTests.datafiles import DCD, PSF

    topology = registry.inspect_file(PSF)
    assert (topology["format"], topology["panel"]) == ("md_topology", "molecules")
    assert topology["summary"] == {"kind": "md_topology", "atoms": 3341, "residues": 214}
    trajectory = registry.inspect_file(DCD)
    assert trajectory["format"] == "md_trajectory"
    assert trajectory["summary"] == {"kind": "md_trajectory", "atoms": 3341, "frames": 98}
    fake = tmp_path / "fake.dcd"
    fake.write_bytes(b"\x00" * 64)
    with pytest.raises(FormatError, match="fake.dcd: not what its name says"):
        registry.inspect_file(fake)
    cut = tmp_path / "cut.dcd"
    cut.write_bytes(Path(DCD).read_bytes()[:200])  # the header's start, then nothing
    with pytest.raises(FormatError, match="cut.dcd: MDAnalysis cannot read it"):
        registry.inspect_file(cut)


PSF_CLAIMING = ("PSF\n\n       1 !NTITLE\n REMARKS claims a billion atoms\n\n"
                "1000000000 !NATOM\n       1 A    1    ALA  CA   CT1    0.070000   12.0110  0\n")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # MDAnalysis'
def test_md_headers_declaring_too_many_atoms_are_refused_before_mdanalysis_allocates(
        tmp_path, with_molecule_formats, monkeypatch):
    import struct

    from MDAnalysisTests.datafiles import DCD, XTC

    psf = tmp_path / "claims.psf"
    psf.write_text(PSF_CLAIMING)
    dcd = tmp_path / "claims.dcd"
    raw = bytearray(Path(DCD).read_bytes())
    title = struct.unpack("<i", raw[92:96])[0]
    raw[96 + title + 8:96 + title + 12] = struct.pack("<i", 10**9)  # the natoms record
    dcd.write_bytes(bytes(raw))
    xtc = tmp_path / "claims.xtc"
    raw = bytearray(Path(XTC).read_bytes())
    raw[4:8] = struct.pack(">i", 10**9)
    xtc.write_bytes(bytes(raw))
    for path in (psf, dcd, xtc):
        with pytest.raises(FormatError, match="element count budget") as refused:
            registry.inspect_file(path)
        assert str(refused.value).startswith(str(path))
        assert "declares 1,000,000,000" in str(refused.value)
        assert "STUDIO_MAX_ELEMENTS" in str(refused.value)
    monkeypatch.setenv("STUDIO_MAX_ELEMENTS", "3000")  # the real run has 3341 atoms
    with pytest.raises(FormatError, match="declares 3,341"):
        registry.inspect_file(DCD)


def test_a_topology_over_the_text_budget_is_refused(tmp_path, with_molecule_formats,
                                                    monkeypatch):
    from MDAnalysisTests.datafiles import GRO

    monkeypatch.setenv("STUDIO_MAX_TEXT_BYTES", "1000")
    with pytest.raises(FormatError, match="text file size budget of 1,000 bytes"):
        registry.inspect_file(GRO)
