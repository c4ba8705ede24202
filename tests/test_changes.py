"""The change feed, its formats and sync (issue 27), on real Delta tables.

The round trip is the contract: the changes of every range, exported and
applied in order to an empty index keyed by object id, give at every version
exactly what a full export of ``records`` gives, whatever wrote the lake.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import random
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from catalog_lake import Catalog, check
from catalog_lake.backfill import backfill
from catalog_lake.changes import write_changes
from catalog_lake.errors import LakeError, UsageError
from catalog_lake.exports import ENGINES
from catalog_lake.feeds import ingest
from catalog_lake.maintain import maintain
from catalog_lake.metrics import apply_metrics
from catalog_lake.refresh import Refresh
from tests.conftest import NOW, Clock, make_item

#: Random operation sequences the round-trip test runs (CI: a few; raise it locally).
ROUND_TRIP_SEEDS = int(os.environ.get("ROUND_TRIP_SEEDS", "3"))


def _index_of_export(catalog: Catalog) -> dict[str, dict]:
    """A full export of the records, as a search engine would hold it."""
    out = io.StringIO()
    catalog.export("jsonl", out)
    return {r["object_id"]: r["record"] for r in map(json.loads, out.getvalue().splitlines())}


def _apply(index: dict[str, dict], text: str) -> None:
    """Apply JSON Lines changes in order, as a loader keyed by object id does."""
    for line in text.splitlines():
        change = json.loads(line)
        if change["op"] == "upsert":
            index[change["object_id"]] = change["record"]
        else:
            index.pop(change["object_id"], None)


def _changes_text(catalog: Catalog, since: int, until: int | None = None) -> str:
    out = io.StringIO()
    write_changes(catalog.changes(since, until), "jsonl", out)
    return out.getvalue()


# --- what a change is -------------------------------------------------------------------


def test_an_unchanged_re_push_is_no_change_and_keeps_updated_at(catalog, clock):
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    version = catalog.lake.version("records")
    before = catalog.records().set_index("client_item_id")["updated_at"]
    clock.now += timedelta(hours=1)

    catalog.push(
        {"items": [make_item(client_item_id="a"), make_item(client_item_id="b", name="B")]}
    )

    found = catalog.changes(version)
    assert found.upserts["client_item_id"].to_pylist() == ["b"]
    after = catalog.records().set_index("client_item_id")
    assert after.loc["a", "updated_at"] == before["a"]  # content unchanged: time unmoved
    assert after.loc["a", "received_at"] == clock.now  # but the guard knows the push
    assert after.loc["b", "updated_at"] == clock.now
    assert check(catalog)["ok"]


def test_the_last_state_in_a_range_wins(catalog, clock):
    catalog.push({"items": [make_item(client_item_id="old")]})
    start = catalog.lake.version("records")
    catalog.push({"items": [make_item(client_item_id="new"), make_item(client_item_id="gone")]})
    catalog.push({"items": [make_item(client_item_id="new", name="second")]})
    catalog.delete(["gone", "old"])

    found = catalog.changes(start)

    # created then deleted within the range: nothing; existed at `since`, deleted: a delete
    assert found.upserts["client_item_id"].to_pylist() == ["new"]
    assert found.upserts["product_name"].to_pylist() == ["second"]
    assert found.deletes.to_pylist() == [1]  # "old"


@pytest.mark.clock
def test_since_and_until_take_versions_or_times_and_refuse_nonsense(catalog, clock):
    catalog.push({"items": [make_item(client_item_id="a")]})
    assert len(catalog.changes(0)) == 1
    assert len(catalog.changes(1)) == 0
    now = datetime.now(UTC).isoformat()  # commit times are the store's, not the catalog clock's
    assert len(catalog.changes(now)) == 0  # the version in force then: the latest
    with pytest.raises(LakeError, match="no version 99"):
        catalog.changes(99)
    with pytest.raises(UsageError, match="before since") as backwards:
        catalog.changes(1, 0)
    assert backwards.value.parameters == ("until", "since")
    with pytest.raises(UsageError, match="^since takes") as nonsense:
        catalog.changes("yesterday")
    assert nonsense.value.parameter == "since"


def test_changes_read_only_the_blocks_a_range_touched(catalog, clock):
    from catalog_lake import settings

    size = settings.ID_BLOCK_SIZE
    catalog.push({"items": [make_item(client_item_id=f"x-{n}") for n in range(size + 10)]})
    version = catalog.lake.version("records")
    catalog.push({"items": [make_item(client_item_id="x-5", name="changed")]})
    found = catalog.changes(version)
    assert found.blocks_read == 1
    assert found.upserts["client_item_id"].to_pylist() == ["x-5"]


# --- formats ------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", *ENGINES])
def test_every_format_carries_upserts_and_deletes_as_its_engine_takes_them(catalog, fmt):
    catalog.push({"items": [make_item(client_item_id="keep"), make_item(client_item_id="drop")]})
    start = catalog.lake.version("records")
    catalog.push({"items": [make_item(client_item_id="keep", name="renamed")]})
    catalog.delete(["drop"])
    found = catalog.changes(start)
    out, deletes = io.StringIO(), io.StringIO()
    write_changes(found, fmt, out, deletes)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    upserted, deleted = {}, set()
    if fmt == "jsonl":
        for line in lines:
            if line["op"] == "upsert":
                upserted[line["object_id"]] = line["record"]
            else:
                deleted.add(line["object_id"])
    elif fmt == "algolia":
        for body in lines:
            for request in body["requests"]:
                if request["action"] == "updateObject":
                    upserted[request["body"]["objectID"]] = request["body"]
                else:
                    assert request["action"] == "deleteObject"
                    deleted.add(request["body"]["objectID"])
    elif fmt in ("elasticsearch", "opensearch"):
        pending = None
        for line in lines:
            if "index" in line:
                pending = line["index"]["_id"]
            elif "delete" in line:
                deleted.add(line["delete"]["_id"])
            else:
                upserted[pending] = line
    else:  # meilisearch, typesense: documents, and the ids to delete apart
        key = "id" if fmt == "typesense" else "object_id"
        upserted = {str(line[key]): line for line in lines}
        deleted = set(json.loads(deletes.getvalue()))
    assert set(upserted) == {"1"}
    assert upserted["1"]["product_name"] == "renamed"
    assert deleted == {"2"}


def test_engines_that_take_deletions_apart_need_somewhere_to_put_them(catalog):
    catalog.push({"items": [make_item(client_item_id="a")]})
    catalog.delete(["a"])
    with pytest.raises(UsageError, match="give deletes a file"):
        write_changes(catalog.changes(1), "meilisearch", io.StringIO())


def test_the_cli_writes_changes_and_says_what_it_wrote(run, tmp_path):
    catalog = Catalog("lake")
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    catalog.delete(["b"])
    done = run("changes", "--since", "0", "--format", "elasticsearch")
    assert done.exit_code == 0
    assert [json.loads(line) for line in done.stdout.splitlines()][0] == {"index": {"_id": "1"}}
    assert "1 upserts, 0 deletes" in done.stderr
    side = tmp_path / "deletes.json"
    typesense = run(
        "changes", "--since", "1", "--format", "typesense", "--output", str(tmp_path / "t.jsonl"),
        "--deletes-output", str(side),
    )  # fmt: skip
    assert typesense.exit_code == 0
    assert json.loads(side.read_text()) == ["2"]
    assert run("changes", "--since", "0", "--format", "solr").exit_code == 2


@pytest.mark.parametrize("fmt", ["meilisearch", "typesense"])
def test_a_deletes_only_range_writes_no_empty_documents_file(run, tmp_path, fmt):
    catalog = Catalog("lake")
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    catalog.delete(["b"])
    documents, side = tmp_path / "docs.ndjson", tmp_path / "deletes.json"
    done = run("changes", "--since", "1", "--format", fmt, "--output", str(documents),
               "--deletes-output", str(side), "--json")  # fmt: skip
    assert done.exit_code == 0, done.output
    assert not documents.exists()  # an engine refuses an empty payload
    assert json.loads(done.stdout)["output"] is None
    assert json.loads(side.read_text()) == ["2"]


# --- the round trip -------------------------------------------------------------------


def _feed(folder: Path, ids: list[str], variant: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    items = [make_item(client_item_id=i, name=f"{i} v{variant}") for i in ids]
    (folder / "catalog.json").write_text(json.dumps({"items": items}))


def _operations(catalog: Catalog, clock: Clock, folder: Path, seed: int):
    """A random sequence of everything that writes records, one operation at a time."""
    rng = random.Random(seed)
    pool = [f"item-{n}" for n in range(14)]
    for step in range(14):
        clock.now += timedelta(minutes=rng.randint(1, 90))
        kind = rng.choice(["push", "push", "delete", "refresh", "metrics", "reprice", "backfill"])
        if kind == "push":
            ids = rng.sample(pool, rng.randint(1, 6))
            window = {
                "pricing_info__discounted_price": "199.00",
                "pricing_info__discount_start_date": (clock.now - timedelta(days=1)).isoformat(),
                "pricing_info__discount_end_date": (clock.now + timedelta(hours=2)).isoformat(),
            }
            items = [
                make_item(client_item_id=i, name=f"{i} v{rng.randint(0, 2)}",
                          **(window if rng.random() < 0.3 else {}))
                for i in ids
            ]  # fmt: skip
            catalog.push({"items": items})
        elif kind == "delete":
            catalog.delete(rng.sample(pool, rng.randint(1, 3)) + ["never-stored"])
        elif kind == "refresh":
            _feed(folder, rng.sample(pool, rng.randint(4, 12)), step)
            ingest(catalog, folder, refresh=Refresh(allow_mass_delete=True))
        elif kind == "metrics":
            path = folder.parent / f"metrics-{step}.csv"
            rows = "".join(f"{i},{rng.randint(0, 50)},{rng.randint(0, 9)}\n" for i in pool[:6])
            path.write_text("client_item_id,likes,sales\n" + rows)
            apply_metrics(catalog, path)
        elif kind == "reprice":
            clock.now += timedelta(hours=3)  # past every discount window just opened
            maintain(catalog)
        else:
            backfill(catalog)
        yield f"{step}:{kind}"
    # Always once: a discount window that closes, and the nightly re-price that follows it.
    clock.now += timedelta(minutes=1)  # pushes at one instant would replay in either order
    window = {
        "pricing_info__discounted_price": "199.00",
        "pricing_info__discount_start_date": (clock.now - timedelta(days=1)).isoformat(),
        "pricing_info__discount_end_date": (clock.now + timedelta(hours=1)).isoformat(),
    }
    catalog.push({"items": [make_item(client_item_id=i, **window) for i in pool[:3]]})
    yield "final:push with a discount"
    clock.now += timedelta(hours=2)
    assert maintain(catalog)["repriced"] >= 3  # and any window an earlier step opened
    yield "final:reprice"


@pytest.mark.parametrize("seed", range(ROUND_TRIP_SEEDS))
def test_applied_changes_equal_a_full_export_at_every_version(tmp_path, seed):
    clock = Clock(NOW)
    catalog = Catalog(tmp_path / "lake", clock=clock)
    catalog.push({"items": [make_item(client_item_id="item-0")]})
    index, version = _index_of_export(catalog), catalog.lake.version("records")
    slow, slow_version = dict(index), version  # follows every third step, over longer ranges
    for number, step in enumerate(_operations(catalog, clock, tmp_path / "feeds", seed)):
        latest = catalog.lake.version("records")
        _apply(index, _changes_text(catalog, version, latest))
        version = latest
        assert index == _index_of_export(catalog), step
        if number % 3 == 2:
            _apply(slow, _changes_text(catalog, slow_version, latest))
            slow_version = latest
            assert slow == index, step
    assert check(catalog)["ok"]


def _write_concurrently(lake: str, seed: int) -> None:
    catalog = Catalog(lake)
    rng = random.Random(seed)
    pool = [f"c-{n}" for n in range(12)]
    for _ in range(6):
        if rng.random() < 0.3:
            catalog.delete(rng.sample(pool, 2))
        else:
            ids = rng.sample(pool, 4)
            catalog.push({"items": [make_item(client_item_id=i, name=f"w{seed}") for i in ids]})


def _round_trip_after_concurrent_writers(lake: str) -> None:
    catalog = Catalog(lake)
    catalog.push({"items": [make_item(client_item_id="c-0")]})
    start = catalog.lake.version("records")
    index = _index_of_export(catalog)
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        for job in [pool.apply_async(_write_concurrently, (lake, s)) for s in range(3)]:
            job.get(timeout=600)
    catalog = Catalog(lake)
    end = catalog.lake.version("records")
    one_by_one = dict(index)
    for version in range(start, end):  # every version on the way, in order
        _apply(one_by_one, _changes_text(catalog, version, version + 1))
    _apply(index, _changes_text(catalog, start))  # and the whole range at once
    assert index == one_by_one == _index_of_export(catalog)
    assert check(catalog)["ok"]


def test_concurrent_writers_changes_still_round_trip(tmp_path):
    _round_trip_after_concurrent_writers(str(tmp_path / "lake"))


def test_the_round_trip_holds_on_an_s3_lake(s3_lake, tmp_path):
    clock = Clock(NOW)
    catalog = Catalog(s3_lake, clock=clock)
    catalog.push({"items": [make_item(client_item_id="item-0")]})
    index, version = _index_of_export(catalog), catalog.lake.version("records")
    for step in _operations(catalog, clock, tmp_path / "feeds", seed=27):
        latest = catalog.lake.version("records")
        _apply(index, _changes_text(catalog, version, latest))
        version = latest
        assert index == _index_of_export(catalog), step
    target = f"{s3_lake.rsplit('/', 1)[0]}/search"  # sync to an s3:// prefix too
    catalog.sync(target)
    catalog.delete(["item-0", "item-1", "item-2"])
    assert catalog.sync(target)["file"].startswith("s3://")


# --- sync -----------------------------------------------------------------------------


@pytest.mark.clock
def test_sync_exports_each_new_range_once_and_keeps_a_cursor_per_target(catalog, tmp_path):
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    first = catalog.sync(str(tmp_path / "out"), "jsonl")
    assert first["from_version"] is None and first["upserts"] == 2
    catalog.delete(["a"])
    second = catalog.sync(str(tmp_path / "out"), "jsonl")
    assert (second["upserts"], second["deletes"]) == (0, 1)
    assert catalog.sync(str(tmp_path / "out"), "jsonl")["file"] is None  # nothing new
    other = catalog.sync(str(tmp_path / "other"), "algolia")  # its own cursor
    assert other["from_version"] is None and other["upserts"] == 1
    index: dict[str, dict] = {}
    for path in sorted((tmp_path / "out").glob("0*")):  # the exports, not the manifest
        _apply(index, path.read_text())
    assert index == _index_of_export(catalog)


def test_a_crash_between_the_file_and_the_cursor_exports_the_same_range_again(
    catalog, tmp_path, monkeypatch
):
    target = str(tmp_path / "out")
    catalog.push({"items": [make_item(client_item_id="a")]})
    catalog.sync(target)
    catalog.push({"items": [make_item(client_item_id="b")]})
    real = catalog.lake.append

    def crash(name, *args, **kwargs):
        if name == "cursors":
            raise OSError("killed before the cursor moved")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(catalog.lake, "append", crash)
    with pytest.raises(OSError):
        catalog.sync(target)
    monkeypatch.setattr(catalog.lake, "append", real)
    again = catalog.sync(target)
    assert again["from_version"] == 1 and again["upserts"] == 1
    assert sorted(p.name for p in Path(target).iterdir()) == [
        ".catalog-lake-target.json",
        "00000000000000000001-full.jsonl",
        "00000000000000000002-since-00000000000000000001.jsonl",
    ]


@pytest.mark.clock
def test_maintain_keeps_what_a_cursor_needs_and_a_cursor_left_behind_is_told(catalog, tmp_path):
    target = str(tmp_path / "out")
    catalog.push({"items": [make_item(client_item_id="a")]})
    cursor = catalog.sync(target)["to_version"]
    catalog.push({"items": [make_item(client_item_id="a", name="changed")]})
    catalog.clock.now += timedelta(days=30)  # the catalog's clock: no part of a file's age
    report = maintain(catalog, retention_hours=0)
    assert report["records_kept_versions"] == [cursor]  # kept by version, whatever the clocks
    assert catalog.sync(target)["upserts"] == 1  # the old version's files were kept
    # a vacuum that ignores the cursors (another tool, or a by-hand VACUUM) leaves it behind
    catalog.push({"items": [make_item(client_item_id="a", name="again")]})
    catalog.lake.tidy("records", compact=True, vacuum=True, retention_hours=0)
    with pytest.raises(LakeError, match="sync --full"):
        catalog.sync(target)
    assert catalog.sync(target, full=True)["upserts"] == 1


def test_a_lake_written_before_deletes_and_the_change_feed_keeps_working(tmp_path):
    """The tables as 0.3.0 wrote them: no tombstones, no guard column, no cursors table."""
    import shutil

    from deltalake import write_deltalake

    from catalog_lake.schemas import ADDED_COLUMNS, PARTITIONS

    lake = tmp_path / "lake"
    catalog = Catalog(lake)
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    for name in ("records", "items", "raw", "pushes"):
        older = catalog.lake.read(name)
        older = older.drop_columns([c for c in ADDED_COLUMNS[name] if c in ("received_at",
                                    "deleted_at", "deleted_by", "operation")])  # fmt: skip
        write_deltalake(str(lake / name), older, mode="overwrite", schema_mode="overwrite",
                        partition_by=PARTITIONS.get(name))  # fmt: skip
    shutil.rmtree(lake / "cursors")
    old_version = Catalog(lake).lake.version("records")

    upgraded = Catalog(lake)
    upgraded.push({"items": [make_item(client_item_id="a", name="new")]})
    answer = upgraded.delete(["b"])

    assert [e["status"] for e in answer["items"]] == ["deleted"]
    found = upgraded.changes(old_version)
    assert found.upserts["client_item_id"].to_pylist() == ["a"]
    assert found.deletes.to_pylist() == [2]
    assert check(upgraded)["ok"]
    assert upgraded.sync(str(tmp_path / "out"))["upserts"] == 1


# --- one target, one lake (issue 41) ----------------------------------------------------


def test_a_target_follows_one_lake_and_refuses_another(tmp_path):
    first, second = Catalog(tmp_path / "one"), Catalog(tmp_path / "two")
    first.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    second.push({"items": [make_item(client_item_id="z")]})
    target = tmp_path / "exports"
    written = first.sync(str(target))
    manifest = json.loads((target / ".catalog-lake-target.json").read_text())
    assert manifest["lake_id"] == first.lake.identity() == written["lake_id"]
    assert manifest["lake"] == str(tmp_path / "one") and manifest["format"] == "jsonl"

    with pytest.raises(UsageError, match=r"follows another lake \(.*one, id .*\), not this one"):
        second.sync(str(target))
    with pytest.raises(UsageError, match="follows another lake"):
        second.sync(str(target), full=True)
    assert [p.name for p in target.glob("0*")] == [Path(written["file"]).name]
    index: dict[str, dict] = {}
    _apply(index, Path(written["file"]).read_text())
    assert index == _index_of_export(first)


def test_a_lake_made_again_at_the_same_path_is_another_lake_to_its_target(tmp_path):
    lake = tmp_path / "lake"
    Catalog(lake).push({"items": [make_item(client_item_id="old")]})
    Catalog(lake).sync(str(tmp_path / "exports"))
    shutil.rmtree(lake)
    Catalog(lake).push({"items": [make_item(client_item_id="new")]})
    with pytest.raises(UsageError, match="follows another lake"):
        Catalog(lake).sync(str(tmp_path / "exports"))


def test_a_relative_target_is_the_folder_it_names_from_where_it_is_typed(
    catalog, tmp_path, monkeypatch
):
    """A deployment's clone synced ``exports/search`` once; a shell elsewhere still gets all."""
    catalog.push({"items": [make_item(client_item_id="a")]})
    (tmp_path / "clone").mkdir()
    (tmp_path / "shell").mkdir()
    monkeypatch.chdir(tmp_path / "clone")
    in_clone = catalog.sync("exports/search")
    monkeypatch.chdir(tmp_path / "shell")
    in_shell = catalog.sync("exports/search")
    assert in_clone["target"] == str(tmp_path / "clone" / "exports" / "search")
    assert in_shell["target"] == str(tmp_path / "shell" / "exports" / "search")
    assert (in_clone["upserts"], in_shell["upserts"]) == (1, 1)
    assert Path(in_shell["file"]).exists()


def test_a_target_emptied_of_its_manifest_starts_again_with_every_record(catalog, tmp_path):
    target = tmp_path / "exports"
    catalog.push({"items": [make_item(client_item_id="a"), make_item(client_item_id="b")]})
    catalog.sync(str(target))
    shutil.rmtree(target)
    catalog.push({"items": [make_item(client_item_id="c")]})
    again = catalog.sync(str(target))
    assert again["from_version"] is None and again["upserts"] == 3


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("", "the sync target is empty"),
        ("   ", "the sync target is empty"),
        ("ftp://example/x", "ftp:// is not a storage this can write"),
        ("http://example/x", "http:// is not a storage this can write"),
    ],
)
def test_a_target_that_names_no_place_to_write_is_refused_in_one_line(
    catalog, tmp_path, monkeypatch, target, message
):
    monkeypatch.chdir(tmp_path)
    catalog.push({"items": [make_item(client_item_id="a")]})
    with pytest.raises(UsageError, match=message) as refused:
        catalog.sync(target)
    assert "\n" not in str(refused.value) and refused.value.parameter == "target"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake"]
