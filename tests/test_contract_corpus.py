"""The rule table judges a seeded corpus of awkward items exactly as the contract was judged before.

``tests/cases/mutation_errors.json`` holds the (field, code) errors, in order,
that the pandas core (before #17's rebuild) gave each of the items of
``tests.mutations.corpus()``, pushed at once. The Polars core must give the
very same: no rule silently loosened or tightened by the rebuild.
"""

from __future__ import annotations

import json
from pathlib import Path

from catalog_lake.parse import parse_push
from catalog_lake.validate import validate
from tests.mutations import corpus

GOLDEN = Path(__file__).parent / "cases" / "mutation_errors.json"


def test_the_mutation_corpus_earns_the_same_errors_as_before():
    expected = json.loads(GOLDEN.read_text())
    items = corpus()
    assert len(items) == expected["items"] == 983

    checked = validate(parse_push({"items": items}))

    got = {str(i): [[e["field"], e["code"]] for e in errs] for i, errs in checked.errors.items()}
    assert got == expected["errors"]
    assert len(got) == 776  # most of the corpus is refused; the rest must pass
