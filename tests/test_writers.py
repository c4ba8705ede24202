"""Any number of writers, on a local folder or an object store, keep ids and keys unique.

Each writer is its own spawned process with its own ``Catalog``, pushing at
the same time into one lake. Nothing serializes them but Delta's optimistic
concurrency: the items commit (ids) and the pushes commit (request ids,
idempotency keys) carry an app transaction, so a writer that another one beat
fails its commit, reads again and retries (docs/design.md, "Writers").
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

from catalog_lake import Catalog, check
from catalog_lake.settings import lake_limit_name, resolved_lake_uri
from tests.conftest import make_item

WRITERS = 4
ROUNDS = 3


def _writer(lake: str, writer: int, env: dict[str, str], start: float) -> list[dict]:
    """One writer's pushes: items of its own, and items every writer sends too."""
    os.environ.update(env)
    catalog = Catalog(lake)
    time.sleep(max(0.0, start - time.time()))  # all writers begin together
    responses = []
    for round_ in range(ROUNDS):
        items = [make_item(client_item_id=f"shared-{round_}-{i}") for i in range(4)]
        items += [make_item(client_item_id=f"w{writer}-{round_}-{i}") for i in range(4)]
        responses.append(catalog.push({"items": items}))
    return responses


def _same_key(lake: str, env: dict[str, str], start: float) -> dict:
    os.environ.update(env)
    catalog = Catalog(lake)
    payload = {"items": [make_item(client_item_id=f"k-{i}") for i in range(5)]}
    # One item refused and one stored with a warning: every writer writes their rows.
    payload["items"][0]["attributes"]["return_window"] = "7 days"
    payload["items"].append(make_item(client_item_id="k-bad", pricing_info__mrp="abc"))
    time.sleep(max(0.0, start - time.time()))
    return catalog.push(payload, idempotency_key="delivery-1")


def _run(function, *args_per_worker) -> list:
    context = multiprocessing.get_context("spawn")  # deltalake never runs after a fork
    with ProcessPoolExecutor(len(args_per_worker), mp_context=context) as pool:
        futures = [pool.submit(function, *args) for args in args_per_worker]
        return [future.result() for future in futures]


def _aws_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")}


def test_concurrent_writers_give_every_item_one_row_and_one_id(lake):
    Catalog(lake).lake.ensure()
    start = time.time() + 6.0  # past the spawned processes' imports
    results = _run(_writer, *[(lake, w, _aws_env(), start) for w in range(WRITERS)])

    catalog = Catalog(lake)
    items = catalog.items()
    assert items["client_item_id"].is_unique
    assert items["object_id"].is_unique
    assert len(items) == ROUNDS * 4 + WRITERS * ROUNDS * 4
    stored = dict(zip(items["client_item_id"], items["object_id"].astype(str), strict=True))
    answered = [
        (client_id, service_id)
        for responses in results
        for response in responses
        for pair in response["items"]
        for client_id, service_id in pair.items()
    ]
    assert all(stored[client_id] == service_id for client_id, service_id in answered)
    assert len(catalog.pushes()) == WRITERS * ROUNDS
    assert catalog.interrupted() == []
    report = check(catalog)
    assert report["ok"], report["violations"]


def test_one_idempotency_key_sent_by_several_writers_at_once_is_stored_once(lake):
    Catalog(lake).lake.ensure()
    start = time.time() + 6.0
    responses = _run(_same_key, *[(lake, _aws_env(), start) for _ in range(WRITERS)])

    catalog = Catalog(lake)
    assert all(response == responses[0] for response in responses)
    pushes = catalog.pushes()
    assert pushes["idempotency_key"].tolist() == ["delivery-1"]
    assert catalog.items()["object_id"].tolist() == [1, 2, 3, 4, 5]
    assert catalog.interrupted() == []  # the losers' raw rows are answered by the winner
    # Readers see what the push answered, not the rows the losers left (issue 26, item 13).
    winner = pushes["request_id"].tolist()
    assert catalog.rejects()[["request_id", "client_item_id"]].values.tolist() == [
        [winner[0], "k-bad"]
    ]
    assert catalog.warnings()[["request_id", "client_item_id"]].values.tolist() == [
        [winner[0], "k-0"]
    ]
    report = check(catalog)
    assert report["ok"], report["violations"]


def test_a_writer_that_stores_records_between_anothers_items_and_records_adds_no_second_row(
    tmp_path,
):
    """The interleaving the same-key race above once hit, made to happen every time.

    Writer A allocates ids for new items and commits them; before A writes their
    records, writer B pushes the same items, finds them stored, and writes their
    records. A's records were to be appended without reading (its items were
    new), so A must find out that B got there: its records commit is fenced at
    the fence read before its ids were settled, fails, and folds instead.
    """
    from catalog_lake.lake import Lake

    lake = str(tmp_path / "lake")
    payload = {"items": [make_item(client_item_id=f"k-{i}") for i in range(3)]}

    class BetweenItemsAndRecords(Lake):
        def commit_files(self, name, staged, metadata, *, fence=None, claim=None):
            result = super().commit_files(name, staged, metadata, fence=fence, claim=claim)
            if name == "items":
                Catalog(lake).push(payload)  # writer B, in between
            return result

    writer_a = Catalog(lake)
    writer_a.lake = BetweenItemsAndRecords(lake)
    writer_a.push(payload)

    catalog = Catalog(lake)
    assert sorted(catalog.records()["client_item_id"]) == ["k-0", "k-1", "k-2"]
    assert check(catalog)["ok"]


FRESH_LAKES = 5


def _first_writer(lakes: list[str], writer: int, env: dict[str, str], start: float) -> list[str]:
    """One push into each of several lakes that do not exist yet, together with the others."""
    os.environ.update(env)
    counts = []
    for number, lake in enumerate(lakes):
        catalog = Catalog(lake)
        time.sleep(max(0.0, start + 4.0 * number - time.time()))  # every writer at once
        items = [make_item(client_item_id=f"first-{writer}-{i}") for i in range(3)]
        counts.append(catalog.push({"items": items})["catalog_push_success_product_count"])
    return counts


def test_first_writers_of_a_new_lake_all_land(lake):
    """Concurrent table creation is as race-proof as every other commit (issue 26, item 7).

    Before, the writer whose version 0 landed second got ``CommitFailedError:
    Protocol changed since last commit`` from table creation (1 push in 40 on S3).
    """
    lakes = [f"{lake}/fresh-{n}" for n in range(FRESH_LAKES)]
    start = time.time() + 6.0
    results = _run(_first_writer, *[(lakes, w, _aws_env(), start) for w in range(WRITERS)])
    assert results == [["3"] * FRESH_LAKES] * WRITERS
    for uri in lakes:
        catalog = Catalog(uri)
        assert len(catalog.items()) == 3 * WRITERS
        report = check(catalog, derive=False)
        assert report["ok"], report["violations"]


def test_every_spelling_of_a_lake_is_one_concurrency_limit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = {lake_limit_name(x) for x in ("lake", "./lake", str(tmp_path / "lake"), "lake/")}
    assert len(names) == 1
    (name,) = names
    assert name.startswith("catalog-lake:lake-") and "/" not in name
    assert resolved_lake_uri("s3://bucket/lake/") == "s3://bucket/lake"
    assert lake_limit_name("s3://bucket/lake") != lake_limit_name(tmp_path / "other" / "lake")


def test_a_writer_beaten_by_one_storing_other_items_commits_the_files_it_wrote(tmp_path, caplog):
    """Issue 45: once writers contend, a lost race that stored none of our keys costs a
    commit, not the work.

    Writer B stores other items between writer A's files and A's commit, twice. The
    first time A had counted its ids on from the lake's counter, B took the same ones:
    A gives its ids again, and holds its ids first from then on. The second time, A's
    held ids, rows and files are still right (the log since says B touched none of
    them), so A commits the same files again, at the new fences.
    """
    import logging

    from catalog_lake.lake import Lake

    lake = str(tmp_path / "lake")
    Catalog(lake).push({"items": [make_item(client_item_id="seed")]})
    rounds: list[int] = []

    class Beaten(Lake):
        def commit_files(self, name, staged, metadata, *, fence=None, claim=None):
            if name == "items" and staged.adds and len(rounds) < 2:
                theirs = [make_item(client_item_id=f"b{len(rounds)}-{i}") for i in range(3)]
                rounds.append(1)
                Catalog(lake).push({"items": theirs})  # writer B, in between
            return super().commit_files(name, staged, metadata, fence=fence, claim=claim)

    writer_a = Catalog(lake)
    writer_a.lake = Beaten(lake)
    with caplog.at_level(logging.INFO, logger="catalog_lake.lake"):
        response = writer_a.push({"items": [make_item(client_item_id=f"a1-{i}") for i in range(3)]})

    assert len(rounds) == 2  # B came between A's files and A's items commit twice
    messages = [r.getMessage() for r in caplog.records]
    redone = [m for m in messages if "Retrying" in m and "'items'" in m]
    assert len(redone) == 1  # the first time only: A's counted ids were taken
    again = [m.split(":")[0] for m in messages if "committed again" in m]
    assert again == ["items", "records"]
    catalog = Catalog(lake)
    ids = catalog.items().set_index("client_item_id")["object_id"]
    assert len(ids) == 10 and ids.is_unique and ids["seed"] == 1
    assert [int(v) for entry in response["items"] for v in entry.values()] == [
        ids[f"a1-{i}"] for i in range(3)
    ]
    assert sorted(catalog.records()["client_item_id"]) == sorted(ids.index)
    assert check(catalog)["ok"]


def test_a_writer_beaten_by_one_storing_the_same_item_gives_its_ids_again(tmp_path):
    """When the winner stored one of our keys, our ids no longer hold: read, give, fold."""
    from catalog_lake.lake import Lake

    lake = str(tmp_path / "lake")
    shared = {"items": [make_item(client_item_id="x"), make_item(client_item_id="y")]}
    beaten: list[bool] = []

    class Beaten(Lake):
        def commit_files(self, name, staged, metadata, *, fence=None, claim=None):
            if name == "items" and not beaten:
                beaten.append(True)
                Catalog(lake).push({"items": [make_item(client_item_id="x", name="B's")]})
            return super().commit_files(name, staged, metadata, fence=fence, claim=claim)

    writer_a = Catalog(lake)
    writer_a.lake = Beaten(lake)
    writer_a.push(shared)

    catalog = Catalog(lake)
    items = catalog.items().set_index("client_item_id")
    assert sorted(items.index) == ["x", "y"] and items["object_id"].is_unique
    assert items.loc["x", "name"] == "B's"  # B's push was received after A's: it wins
    assert catalog.records()["client_item_id"].is_unique
    assert check(catalog)["ok"]


def test_what_was_committed_since_a_version_is_read_from_the_log_of_any_store(lake):
    """``commitlog``: on a folder and on the S3 server alike, every commit since, whole."""
    catalog = Catalog(lake)
    catalog.push({"items": [make_item(client_item_id="a")]})
    before = catalog.lake.version("items")
    catalog.push(
        {"items": [make_item(client_item_id="b"), make_item(client_item_id="a", name="2")]}
    )

    since = catalog.lake.since("items", before)
    assert since.version == catalog.lake.version("items")
    assert since.added and since.removed  # "a" is folded into its block: a rewrite
    assert since.rewritten() == {0}
    from catalog_lake.lake.log import keys_added

    added = keys_added(*catalog.lake.filesystem("items"), since)
    assert sorted(added["client_item_id"].to_pylist()) == ["a", "b"]
