"""Cleaning and typing skip work only where it provably changes nothing.

``clean._clean_arrow`` runs each RE2 pass only on the strings a cheap test
says it can match. The reference below runs every pass on every string, as
cleaning is specified; the two must agree on any text at all.

Tag slugs take Arrow kernels for ASCII text and Python's Unicode rules for
the rest; together they must give what Python's rules give on everything.

``clean.keeping`` lets typed items reuse the values validation parsed; they
must be the values parsing afresh gives, and other data must never get them.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from bench import synth
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog_lake import clean
from catalog_lake.catalog import check_group
from catalog_lake.parse import parse_push
from catalog_lake.records import _slug, typed_items
from catalog_lake.validate import validate


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


def test_typed_items_from_kept_conversions_are_those_parsed_afresh():
    parsed = parse_push({"items": list(synth.items(400, dirty_fraction=0.2))})
    groups = pd.Series(np.zeros(400, dtype=int))
    kept = check_group(parsed, groups)  # validation and typing share one store

    checked = validate(parsed, groups=groups)  # no store: every value parsed again
    afresh = typed_items(checked.frame[kept.keep])

    assert 0 < kept.keep.sum() < 400
    pd.testing.assert_frame_equal(kept.typed.frame, afresh.frame)
    for name, column in afresh.lists.items():
        assert kept.typed.lists[name].equals(column), name


def test_a_kept_conversion_is_used_only_for_the_same_values():
    store: dict = {}
    sent = pd.Series(["yes", "no", "on"], name="flag")
    with clean.keeping(store):
        first = clean.to_bool(sent)
        rows = clean.to_bool(pd.Series(["no", "on"], index=[1, 2], name="flag"))
        (kept_for,) = [source for source, _ in store.values()]
        changed_rows = clean.to_bool(pd.Series(["yes", "yes"], index=[1, 2], name="flag"))
        other = clean.to_bool(pd.Series(["no", "yes", "off"], name="flag"))
        end = clean.to_timestamp(pd.Series(["2026-01-31"], name="day"), end_of_day=True)
        start = clean.to_timestamp(pd.Series(["2026-01-31"], name="day"))

    assert first.tolist() == [True, False, True]
    assert rows.tolist() == [False, True] and rows.index.tolist() == [1, 2]
    assert kept_for is sent  # those rows were a subset of what was kept: reused
    assert changed_rows.tolist() == [True, True]
    assert other.tolist() == [False, True, False]
    assert end.iloc[0] > start.iloc[0]  # options are part of what is kept
    with clean.keeping(store):
        as_number = clean.money_text(pd.Series([1.0, 2], dtype=object, name="price"))
        # Equal to the kept column (1 == 1.0) but not the same values: parsed again.
        as_other_number = clean.money_text(pd.Series([1, 2.0], dtype=object, name="price"))
    assert as_number.tolist() == ["1.0", "2"]
    assert as_other_number.tolist() == ["1", "2.0"]
    assert {key[0] for key in store} == {"to_bool", "to_timestamp", "money_text", "_mixed_kinds"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text())))
def test_text_lengths_are_python_lengths_in_arrow_text_and_in_objects(values):
    values = [v.encode("utf-8", "ignore").decode("utf-8") if v else v for v in values]
    expected = [len(v) if v is not None else 0 for v in values]
    as_text = pd.Series(pd.array(values, dtype=clean.TEXT), index=range(5, 5 + len(values)))
    as_objects = pd.Series(values + [12.5], dtype=object)

    assert clean.text_length(as_text).tolist() == expected
    assert clean.text_length(as_text).index.equals(as_text.index)
    assert clean.text_length(as_objects).tolist() == [*expected, 4]  # a number counts as its text


def slug_by_python(values: pd.Series) -> pd.Series:
    slug = values.astype(object).str.lower().str.replace(r"[^\w]+", "-", regex=True)
    return slug.str.strip("-").where(lambda s: s.str.len() > 0)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(), st.text(st.sampled_from([*"aZ_9 -./&éΣİ漢"])))))
def test_tag_slugs_are_what_python_unicode_rules_give(values):
    values = pd.Series(values, dtype=object)
    fast, expected = _slug(values), slug_by_python(values)
    assert fast.isna().tolist() == expected.isna().tolist()
    assert fast.dropna().tolist() == expected.dropna().tolist()
