"""CSV cells that a spreadsheet would run as formulas stay text (core.rows)."""

import pytest

from core.rows import spreadsheet_safe


@pytest.mark.parametrize(("cell", "safe"), [
    ("=HYPERLINK(\"http://evil\",\"click\")", "'=HYPERLINK(\"http://evil\",\"click\")"),
    ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
    ("-2+3", "'-2+3"),
    ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
    ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"),
    ("-0.5", "-0.5"),  # a number stays a number
    ("+3e-4", "+3e-4"),
    ("a - b", "a - b"),  # only the first character matters
    ("", ""),
    (-0.5, -0.5),
    (None, None),
])
def test_formula_cells_become_text(cell, safe):
    assert spreadsheet_safe(cell) == safe
