"""Cleaning and typing skip work only where it provably changes nothing.

``clean._clean_arrow`` runs each RE2 pass only on the strings a cheap test
says it can match. The reference below runs every pass on every string, as
cleaning is specified; the two must agree on any text at all.

A column of few values is cleaned once per distinct value; each value must
come out as it does alone.

Tag slugs take Arrow kernels for ASCII text and Python's Unicode rules for
the rest; together they must give what Python's rules give on everything.

"""

from __future__ import annotations

import html

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog_lake import clean
from catalog_lake.records import _slug


def every_pass(text: pa.Array, rich: bool) -> pa.Array:
    if rich:
        text = pc.replace_substring_regex(text, clean._BLOCK_TAG_RE2, " ")
        text = pc.replace_substring_regex(text, clean._TAG_RE2, "")
        text = pa.array(
            [None if t is None else html.unescape(t) for t in text.to_pylist()], pa.string()
        )
    text = pc.replace_substring_regex(text, clean._CONTROL_RE2, "")
    text = pc.replace_substring_regex(text, clean._SPACE_RE2, " ")
    text = pc.utf8_trim(text, " ")
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


PIECES = st.sampled_from(
    [*"ab <>/p&;  \t\n\r\x0b\x0c\x00\x1b\x1f\x7f\x85\xa0\u2003\u200b\u2028\ufeff\u3000é漢"]
    # every other character of \p{Z}, which the whitespace pass spells out
    + [*"\u1680\u2000\u200a\u2029\u202f\u205f"]
    + ["<br>", "<B>", "<p class='x'>", "<!--c-->", "&lt;", "&amp;", "  ", "\r\n"]
)
TEXTS = st.lists(st.one_of(st.none(), st.text(), st.lists(PIECES, max_size=12).map("".join)))


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.booleans())
def test_cleaning_gives_what_running_every_pass_on_every_string_gives(values, rich):
    text = pa.array(values, pa.string())
    assert clean._clean_arrow(text, rich).to_pylist() == every_pass(text, rich).to_pylist()


def test_plain_ascii_text_is_only_trimmed():
    text = pa.array(["Aashirvaad Atta", " 5 kg ", "a  b", "tab\there", None])
    assert clean._clean_arrow(text, True).to_pylist() == [
        "Aashirvaad Atta",
        "5 kg",
        "a b",
        "tab here",
        None,
    ]


def slug_by_python(values: pd.Series) -> pd.Series:
    slug = values.astype(object).str.lower().str.replace(r"[^\w]+", "-", regex=True)
    return slug.str.strip("-").where(lambda s: s.str.len() > 0)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(), st.text(st.sampled_from([*"aZ_9 -./&éΣİ漢"])))))
def test_tag_slugs_are_what_python_unicode_rules_give(values):
    fast = pd.Series(_slug(pa.array(values, pa.string())).to_pylist(), dtype=object)
    values = pd.Series(values, dtype=object)
    expected = slug_by_python(values)
    assert fast.isna().tolist() == expected.isna().tolist()
    assert fast.dropna().tolist() == expected.dropna().tolist()


FEW = st.sampled_from(
    ["P1D", " pt2h ", "P", "P1DT", "x", "", "PT1.5H", "<p>A &amp; B</p>", "F&B"]
    + ["2026-11-01", "2026-11-01T10:00:00.1234567+05:30", "9999-12-31", "0001-01-01T00:30+01:00"]
)
#: Columns of a few values repeated (cleaned once per distinct value) and of many.
COLUMNS = st.one_of(
    st.lists(st.one_of(st.none(), FEW), min_size=40, max_size=80),
    st.lists(st.one_of(st.none(), st.text(), FEW), max_size=20),
)


@settings(max_examples=200, deadline=None)
@given(COLUMNS, st.booleans())
def test_a_value_is_cleaned_alike_whatever_else_its_column_holds(values, rich):
    column = pa.array(values, pa.string())
    alone = [clean.clean_text(pa.array([value], pa.string()), rich=rich)[0] for value in values]
    assert clean.clean_text(column, rich=rich).to_pylist() == [v.as_py() for v in alone]
    canonical, seconds = clean.durations(column)
    one_by_one = [clean.durations(pa.array([value], pa.string())) for value in values]
    assert canonical.to_pylist() == [c[0].as_py() for c, _ in one_by_one]
    assert seconds.to_pylist() == [s[0].as_py() for _, s in one_by_one]
    for end_of_day in (False, True):
        dates = clean.timestamps(column, end_of_day=end_of_day)
        alone = [clean.timestamps(pa.array([v], pa.string()), end_of_day=end_of_day)[0]
                 for v in values]  # fmt: skip
        assert dates.dtype == "datetime64[us, UTC]"
        assert dates.isna().tolist() == [pd.isna(v) for v in alone]
        assert dates.dropna().tolist() == [v for v in alone if not pd.isna(v)]
