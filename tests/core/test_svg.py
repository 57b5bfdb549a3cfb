"""The SVG pieces the page charts and the replay chart share (core.svg)."""

import xml.etree.ElementTree as ET

from core.svg import Panel, broken_line, svg_open, text, title_and_desc


def test_a_panel_places_slots_across_and_clamps_values_to_its_scale():
    panel = Panel(left=40, top=10, width=300, height=100, count=3)
    assert panel.slot == 100 and [panel.x(i) for i in range(3)] == [90, 190, 290]
    assert (panel.y(0), panel.y(0.25), panel.y(1)) == (110, 85, 10)
    assert (panel.y(-0.5), panel.y(1.7)) == (110, 10)  # out of range: drawn at the edge
    assert (panel.length(0.5), panel.length(2)) == (50, 100) and panel.bottom == 110
    assert Panel(0, 0, 300, 100, count=0).slot == 300  # no items: one empty slot, no division by zero


def test_the_grid_labels_every_quarter_in_percent():
    grid = Panel(left=40, top=10, width=300, height=100, count=1).grid(right=340, font_size=11, label_dy=4)
    labels = [ET.fromstring(part).text for part in grid if part.startswith("<text")]
    assert labels == ["0%", "25%", "50%", "75%", "100%"]
    assert grid[0] == '<line x1="40" x2="340" y1="110.0" y2="110.0" stroke="#d0d7de" />'


def test_a_line_breaks_where_a_value_is_missing_and_a_lone_point_draws_none():
    parts = broken_line([(1, 2), (3, 4), None, (5, 6), None, (7, 8), (9, 10.04)], 'stroke="red"')
    assert parts == ['<polyline points="1.0,2.0 3.0,4.0" stroke="red" />',
                     '<polyline points="7.0,8.0 9.0,10.0" stroke="red" />']
    assert broken_line([None, (1, 1), None], "") == []


def test_names_are_escaped_in_text_and_attributes():
    svg = (svg_open(100, 50, "c", attributes={"class": 'a"b'}) + "".join(title_and_desc("c", "<T>", "x & 'y'"))
           + f"<text>{text('<script>')}</text></svg>")
    root = ET.fromstring(svg)
    assert root.get("class") == 'a"b' and root.get("aria-labelledby") == "c-title c-desc"
    assert [child.text for child in root] == ["<T>", "x & 'y'", "<script>"]
    assert "<script>" not in svg
