"""Exports of the molecule panel: the selected rows (or all shown) as SMILES, SDF, FASTA and
PDB read back with RDKit, gemmi and our own readers; an exported SDF or CSV opened again brings
its accept/reject/flag marks back; refusals where a format cannot hold the selection; the
histogram as PNG, SVG and PDF drawn here with their provenance."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QItemSelectionModel
from PySide6.QtGui import QImage

from engine import provenance
from engine.io.molecules import DESCRIPTOR_NAMES, read_fasta, read_pdb, read_sdf, read_smiles
from panels.molecules import MANIFEST
from panels.molecules.model import FOREIGN_FLAG_COLUMN, MoleculeSetModel
from panels.molecules.view import TAB_3D, TAB_HISTOGRAMS
from tests.panels.molecules.test_geometry_and_sequence import peptide_pdb

SMILES = ["CCO ethanol", "c1ccccc1O phenol", "CC(=O)Oc1ccccc1C(=O)O aspirin",
          "CCCCCCCCCC decane"]
SELECT = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows


@pytest.fixture
def molecules(tmp_path):
    path = tmp_path / "set.smi"
    path.write_text("\n".join(SMILES) + "\n")
    return path


def select_grid(panel, rows: list[int]) -> None:
    for row in rows:
        panel.grid.selectionModel().select(panel.grid_model.index(row), SELECT)


def heavy_and_hydrogens(smiles: str) -> int:
    from rdkit import Chem

    return Chem.AddHs(Chem.MolFromSmiles(smiles)).GetNumAtoms()


def test_manifest_lists_every_export():
    assert set(MANIFEST.exports) == {"png", "svg", "pdf", "smi", "csv", "sdf", "fasta", "pdb"}


def test_selected_molecules_as_smiles_sdf_and_pdb(panel, molecules, tmp_path):
    from rdkit import Chem

    assert panel.open_file(molecules)
    panel.select_row(2)
    panel.set_flag("accepted")  # aspirin
    select_grid(panel, [0, 2])
    smi = panel.export_set(tmp_path / "out.smi")
    assert smi.read_text().splitlines() == ["CCO ethanol", "CC(=O)Oc1ccccc1C(=O)O aspirin"]
    assert "2 record(s) of 2 selected" in panel.status.text()

    sdf = panel.export_set(tmp_path / "out.sdf")
    supplied = [m for m in Chem.SDMolSupplier(str(sdf))]
    assert [m.GetProp("_Name") for m in supplied] == ["ethanol", "aspirin"]
    assert [m.GetProp("flag") for m in supplied] == ["unmarked", "accepted"]
    assert abs(float(supplied[1].GetProp("MolWt")) - 180.159) < 1e-3
    assert not supplied[0].GetConformer().Is3D()  # nothing embedded: 2-D depiction
    assert [r.smiles for r in read_sdf(sdf).records] == ["CCO", "CC(=O)Oc1ccccc1C(=O)O"]

    pdb = panel.export_set(tmp_path / "out.pdb")
    models = read_pdb(pdb).records  # one MODEL per molecule, hydrogens embedded by ETKDG
    assert [len(m.atoms) for m in models] == [heavy_and_hydrogens("CCO"),
                                              heavy_and_hydrogens("CC(=O)Oc1ccccc1C(=O)O")]
    positions = np.array([(a.x, a.y, a.z) for a in models[1].atoms])
    assert np.ptp(positions[:, 2]) > 0.5  # really 3-D


@pytest.mark.parametrize("suffix", [".sdf", ".csv"])
def test_marks_come_back_when_an_exported_file_is_opened(panel, molecules, tmp_path, suffix):
    assert panel.open_file(molecules)
    for row, mark in ((0, "accepted"), (1, "rejected"), (3, "flagged")):  # aspirin: unmarked
        panel.select_row(row)
        panel.set_flag(mark)
    assert panel.open_file(panel.export_set(tmp_path / f"marked{suffix}"))
    entries = panel.model.entries
    assert [(e.name, e.flag) for e in entries] == [
        ("ethanol", "accepted"), ("phenol", "rejected"), ("aspirin", ""), ("decane", "flagged")]
    assert not any("flag" in e.props for e in entries)
    assert "flag" not in panel.model.file_columns()
    # the exported descriptors are computed columns already: not shown a second time
    assert not set(DESCRIPTOR_NAMES) & set(panel.model.file_columns())
    columns = panel.table_model.columns
    assert columns.count("flag") == 1 and len(columns) == len(set(columns))
    flag = columns.index("flag")
    assert [panel.table_model.data(panel.table_model.index(row, flag))
            for row in range(4)] == ["accepted", "rejected", "", "flagged"]
    panel.select_row(2)
    panel.set_flag("rejected")  # a restored set is marked (and exported) like any other
    assert [e.flag for e in read_marks(panel.export_set(tmp_path / f"again{suffix}"))] == \
        ["accepted", "rejected", "rejected", "flagged"]


def read_marks(path):
    model = MoleculeSetModel()
    model.load(path)
    return model.entries


def test_a_files_own_flag_column_stays_a_column(tmp_path):
    """Only the marks the panel writes are taken as marks; other values are the file's data,
    kept under a name the mark column does not hide."""
    path = tmp_path / "own.csv"
    path.write_text("smiles,name,flag\nCCO,ethanol,accepted\nCCC,propane,needs review\n"
                    "CCCC,butane,\n")
    model = MoleculeSetModel()
    model.load(path)
    assert [e.flag for e in model.entries] == ["", "", ""]
    assert [e.props.get(FOREIGN_FLAG_COLUMN) for e in model.entries] == [
        "accepted", "needs review", None]
    assert model.file_columns() == [FOREIGN_FLAG_COLUMN]
    assert model.value(1, FOREIGN_FLAG_COLUMN) == "needs review"


def test_nothing_selected_exports_every_shown_row_and_says_so(panel, molecules, tmp_path):
    assert panel.open_file(molecules)
    panel.search("c1ccccc1")  # moves to the first hit without selecting it
    lines = panel.export_set(tmp_path / "all.smi").read_text().splitlines()
    assert len(lines) == len(SMILES) and "all 4 shown (none selected)" in panel.status.text()
    panel.model.load_smiles(["CCO", "C1CC", "c1ccccc1"], "generated")  # C1CC does not parse
    sdf = panel.export_set(tmp_path / "all.sdf")
    assert [r.smiles for r in read_sdf(sdf).records] == ["CCO", "c1ccccc1"]
    assert "2 record(s) of all 3 shown" in panel.status.text()
    assert "1 skipped" in panel.status.text()


def test_the_dialog_exports_on_the_worker_and_reports_in_the_status(panel, molecules, tmp_path,
                                                                   qtbot):
    assert panel.open_file(molecules)
    select_grid(panel, [1, 3])
    assert panel.export_set(tmp_path / "bg.pdb", background=True) is None
    assert panel.status.text().startswith("exporting 2 selected to bg.pdb")
    assert panel.wait_computed()
    qtbot.waitUntil(lambda: panel.status.text().startswith("Exported"), timeout=10_000)
    assert len(read_pdb(tmp_path / "bg.pdb").records) == 2
    panel.export_set(tmp_path / "bg.fasta", background=True)  # refused on the worker
    assert panel.wait_computed()
    qtbot.waitUntil(lambda: bool(panel.host.errors), timeout=10_000)
    assert panel.status.text().startswith("Not exported: FASTA holds sequences")
    assert not (tmp_path / "bg.fasta").exists()


def test_table_selection_is_exported_when_it_is_the_latest(panel, molecules, tmp_path):
    assert panel.open_file(molecules)
    select_grid(panel, [0])
    panel.table.selectionModel().select(panel.table_model.index(3, 0), SELECT)  # decane
    assert read_smiles(panel.export_set(tmp_path / "t.smi")).records[0].name == "decane"


def test_a_computed_conformer_goes_into_the_sdf(panel, molecules, tmp_path, qtbot):
    from rdkit import Chem

    assert panel.open_file(molecules)
    panel.tabs.setCurrentIndex(TAB_3D)
    panel.select_row(1)  # phenol: its ETKDG conformer is computed for the 3-D tab
    qtbot.waitUntil(lambda: panel.scene is not None and panel._current == 1, timeout=20_000)
    select_grid(panel, [1])
    (mol,) = Chem.SDMolSupplier(str(panel.export_set(tmp_path / "one.sdf")), removeHs=False)
    assert mol.GetConformer().Is3D()
    np.testing.assert_allclose(mol.GetConformer().GetPositions(), panel.scene.positions,
                               atol=1e-3)


def test_an_xyz_molecule_keeps_its_file_coordinates(panel, tmp_path):
    from rdkit import Chem
    from rdkit.Chem import AllChem

    mol = Chem.AddHs(Chem.MolFromSmiles("CCO"))
    AllChem.EmbedMolecule(mol, randomSeed=3)
    path = tmp_path / "ethanol.xyz"
    path.write_text(Chem.MolToXYZBlock(mol))
    assert panel.open_file(path)
    (written,) = Chem.SDMolSupplier(str(panel.export_set(tmp_path / "x.sdf")), removeHs=False)
    np.testing.assert_allclose(written.GetConformer().GetPositions(),
                               mol.GetConformer().GetPositions(), atol=1e-3)
    assert Chem.MolToSmiles(Chem.RemoveHs(written)) == "CCO"


def test_a_structure_round_trips_through_pdb_and_its_chains_through_fasta(panel, tmp_path):
    import gemmi

    source = peptide_pdb(tmp_path / "pep.pdb")  # chains A and B
    assert panel.open_file(source)
    original = read_pdb(source).records[0]
    (back,) = read_pdb(panel.export_set(tmp_path / "back.pdb")).records
    assert len(back.atoms) == len(original.atoms) and back.chains == original.chains
    assert [(a.name, a.residue, a.x, a.b_factor) for a in back.atoms] == \
        [(a.name, a.residue, a.x, a.b_factor) for a in original.atoms]
    assert gemmi.read_structure(str(tmp_path / "back.pdb"))[0].count_atom_sites() == \
        len(original.atoms)
    records = read_fasta(panel.export_set(tmp_path / "chains.fasta")).records
    assert [(r.name, r.sequence) for r in records] == [
        ("pep chain A", "MKVLAD"), ("pep chain B", "MKVLAD")]

    cif = tmp_path / "pep.cif"  # mmCIF read by gemmi comes back as PDB too
    gemmi.read_structure(str(source)).make_mmcif_document().write_file(str(cif))
    assert panel.open_file(cif)
    (from_cif,) = read_pdb(panel.export_set(tmp_path / "from_cif.pdb")).records
    assert len(from_cif.atoms) == len(original.atoms) and from_cif.chains == original.chains


def test_antibody_chains_are_separate_fasta_records(panel, tmp_path):
    long_vh = "EVQLVESGGGLVQPGGSLRLSCAASGFTFSSYAMSWVRQAPGKGLEWVSAISGSGGSTYYADSVKGRFTISRDNSKNTL"
    (tmp_path / "jain2017_sd02.csv").write_text(
        f"Name,VH,VL\nalpha,{long_vh},DIQMTQSPSSLSASVGDRVT\nbeta,QVQLQQ,EIVLTQ\n")
    assert panel.open_antibodies(tmp_path)
    select_grid(panel, [0, 1])  # alpha's VH and VL
    fasta = panel.export_set(tmp_path / "alpha.fasta")
    assert [(r.name, r.sequence) for r in read_fasta(fasta).records] == [
        ("alpha VH", long_vh), ("alpha VL", "DIQMTQSPSSLSASVGDRVT")]
    assert max(len(line) for line in fasta.read_text().splitlines()) == 60  # wrapped


def test_formats_that_cannot_hold_the_selection_are_refused(panel, molecules, tmp_path):
    assert panel.open_file(molecules)
    assert panel.export_set(tmp_path / "mols.fasta") is None
    title, message = panel.host.errors[-1]
    assert title == "Cannot export this selection" and "FASTA holds sequences" in message
    assert "no sequence among 4 small molecule(s)" in message
    assert panel.status.text().startswith("Not exported: FASTA")
    assert not (tmp_path / "mols.fasta").exists()
    assert panel.export_set(tmp_path / "mols.xlsx") is None
    assert ".sdf" in panel.host.errors[-1][1]

    (tmp_path / "seqs.fasta").write_text(">one\nMKVLAD\n")
    assert panel.open_file(tmp_path / "seqs.fasta")
    for suffix, said in ((".sdf", "SDF holds small molecules"), (".pdb", "no structure"),
                         (".smi", "SMILES lists small molecules")):
        assert panel.export_set(tmp_path / f"seqs{suffix}") is None
        message = panel.host.errors[-1][1]
        assert said in message and ("1 protein(s)" in message or suffix == ".smi")


def test_histogram_exports_png_svg_and_pdf(panel, molecules, tmp_path):
    reference = tmp_path / "ref.smi"
    reference.write_text("c1ccccc1C(=O)O benzoic\nCCCCCC hexane\n")
    assert panel.open_file(molecules) and panel.load_reference(reference)
    panel.histogram_box.setCurrentText("HeavyAtoms")
    png = panel.export_histogram(tmp_path / "h.png")
    assert panel.tabs.currentIndex() == TAB_HISTOGRAMS
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    assert QImage(str(png)).width() == 2 * panel.histogram.width()  # 192 dpi by default
    svg = panel.export_histogram(tmp_path / "h.svg").read_text()
    assert "<svg" in svg and "HeavyAtoms" in svg
    pdf = panel.export_histogram(tmp_path / "h.pdf")  # drawn here, no engine needed
    assert pdf.read_bytes()[:5] == b"%PDF-" and b"%%EOF" in pdf.read_bytes()[-64:]
    for written in (png, tmp_path / "h.svg", pdf):
        record = provenance.read(written)
        assert record["view"]["property"] == "HeavyAtoms", written
        assert [s["path"] for s in record["sources"]] == [str(molecules.resolve()),
                                                          str(reference.resolve())]
    with pytest.raises(ValueError, match="h.gif: export as .png, .svg or .pdf"):
        panel.export_histogram(tmp_path / "h.gif")
