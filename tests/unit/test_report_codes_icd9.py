"""ICD-9-CM code names: the bundled table, lookup, detection, and ``inspect --codes icd9``."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from service.cli import app
from streammom.model import HierarchyModel, TreeNode
from streammom.report.codes import Icd9Names, Icd10Names, detect_codes, load_codes

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "streammom" / "report" / "data" / "icd9cm_names.csv.gz"


@pytest.fixture(scope="module")
def icd9() -> Icd9Names:
    return Icd9Names()


def test_leaf_codes_dotted_undotted_and_case(icd9: Icd9Names) -> None:
    assert icd9.name("4280") == "Congestive heart failure, unspecified"
    assert icd9.name("428.0") == icd9.name(" 428.0 ") == icd9.name("4280")
    assert icd9.name("25000") == icd9.name("250.00")
    assert icd9.name("25000").startswith("Diabetes mellitus without mention of complication")
    assert icd9.name("4019") == "Unspecified essential hypertension"


def test_three_digit_categories(icd9: Icd9Names) -> None:
    assert icd9.name("428") == "Heart failure"
    assert icd9.name("001") == "Cholera"
    assert icd9.name("250") == "Diabetes mellitus"
    assert icd9.name("042") == "Human immunodeficiency virus [HIV] disease"  # a leaf itself


def test_v_and_e_codes(icd9: Icd9Names) -> None:
    assert icd9.name("V01") == "Contact with or exposure to communicable diseases"
    assert icd9.name("V010") == icd9.name("v01.0") == "Contact with or exposure to cholera"
    assert icd9.name("E800") == "Railway accident involving collision with rolling stock"
    assert icd9.name("e800.0") == icd9.name("E8000")
    assert icd9.name("E8000").endswith("injuring railway employee")


def test_ancestor_fallback_like_icd10(icd9: Icd9Names) -> None:
    # Unknown sub-codes fall back to the closest named ancestor, unmarked (as Icd10Names does).
    assert icd9.name("4289") == "Heart failure, unspecified"
    assert icd9.name("42899") == "Heart failure, unspecified"
    assert icd9.name("0032") == icd9.name("003")  # 4-char parent of 00320 is not named


def test_unknown_codes(icd9: Icd9Names) -> None:
    for code in ("", "999999", "XYZ", "42", "I509", "017Z"):
        assert icd9.name(code) is None, code
    assert icd9.name("000") is None


def test_load_codes_keyword() -> None:
    for spec in ("icd9", "ICD9", "icd-9"):
        assert isinstance(load_codes(spec), Icd9Names)


def test_table_shape() -> None:
    text = gzip.decompress(TABLE.read_bytes()).decode("utf-8")
    lines = text.splitlines()
    assert lines[0] == "code,name"
    assert not any(line.startswith("#") for line in lines)
    assert len(Icd9Names()) == len(lines) - 1 > 15_000
    assert TABLE.stat().st_size < 400_000


@pytest.mark.parametrize(
    "names",
    [
        ["428", "4280", "401", "250.00", "V45.81", "E849.0", "414.01", "427.31"],
        ["4280", "4019", "25000", "41401", "42731", "5849", "5990", "2724"],
        ["038", "428", "518", "584", "599", "V58", "E878"],
    ],
)
def test_detect_icd9(names: list[str]) -> None:
    assert isinstance(detect_codes(names), Icd9Names)


@pytest.mark.parametrize(
    "names",
    [
        ["I50.9", "E119", "J449", "N179"],
        ["I509", "E11.9", "V01", "E119", "Z794"],  # V01/E119 fit ICD-9 shapes too
        ["E1190", "E119", "E669", "E785"],
    ],
)
def test_detect_icd10_not_icd9(names: list[str]) -> None:
    assert isinstance(detect_codes(names), Icd10Names)


@pytest.mark.parametrize(
    "names",
    [
        [str(i) for i in range(300)],  # column numbers
        [str(i) for i in range(100, 200)],  # consecutive 3-digit column numbers
        [f"feat{i}" for i in range(50)],
        ["A", "B", "C"],
        ["heart", "failure", "428"],
        ["999999", "123456", "000"],
    ],
)
def test_detect_nothing(names: list[str]) -> None:
    assert detect_codes(names) is None


def _load_tool():
    spec = importlib.util.spec_from_file_location(
        "make_icd9_names", ROOT / "tools/make_icd9_names.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_icd9_names", mod)
    spec.loader.exec_module(mod)
    return mod


def test_tool_builds_categories_and_is_deterministic(tmp_path: Path) -> None:
    tool = _load_tool()
    tree = {
        "id": "root",
        "children": [
            {
                "id": "Chapter",
                "children": [
                    {
                        "id": "Section",
                        "children": [
                            {
                                "id": "Heart failure",
                                "children": [
                                    {
                                        "id": "4280",
                                        "description": "Congestive heart failure, unspecified",
                                    },
                                    {
                                        "id": "42820",
                                        "description": "Systolic heart failure, unspecified",
                                    },
                                ],
                            },
                            {
                                "id": "HIV disease",
                                "children": [
                                    {
                                        "id": "042",
                                        "description": "Human immunodeficiency virus [HIV] disease",
                                    },
                                ],
                            },
                            {
                                "id": "Railway accidents",
                                "children": [
                                    {"id": "E8000", "description": "Railway employee"},
                                ],
                            },
                        ],
                    },
                ],
            },
        ],
    }
    src = tmp_path / "icd-9-hierarchy.json"
    src.write_text(json.dumps({"tree": tree, "codes": []}), encoding="utf-8")
    a, b = tmp_path / "a.csv.gz", tmp_path / "b.csv.gz"
    assert tool.main([str(src), "-o", str(a)]) == 0
    assert tool.main([str(src), "-o", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert gzip.decompress(a.read_bytes()).decode("utf-8").splitlines() == [
        "code,name",
        "042,Human immunodeficiency virus [HIV] disease",
        "428,Heart failure",
        '4280,"Congestive heart failure, unspecified"',
        '42820,"Systolic heart failure, unspecified"',
        "E800,Railway accidents",
        "E8000,Railway employee",
    ]


def test_cli_inspect_codes_icd9(tmp_path: Path) -> None:
    names = ["4280", "428", "V010", "E8000", "LOCAL1"]
    mean = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    model = HierarchyModel([TreeNode(0, -1, 0, 50.0, mean)], n_features=5, feature_names=names)
    path = tmp_path / "icd9-model.smm"
    path.write_bytes(model.to_bytes())
    runner = CliRunner()
    for args in (["--codes", "icd9"], []):  # explicit, and auto-detected
        result = runner.invoke(app, ["inspect", str(path), "--top", "5", *args])
        assert result.exit_code == 0, result.output
        out = " ".join(result.output.split())
        assert "Congestive heart failure, unspecified" in out, args
        assert "Heart failure" in out and "Contact with or exposure to cholera" in out
    result = runner.invoke(app, ["inspect", str(path), "--codes", "icd9", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    by_code = {
        f["code"] if "code" in f else f.get("feature"): f["name"]
        for f in summary["nodes"][0]["top_features"]
    }
    assert "Congestive heart failure, unspecified" in by_code.values()
