"""
The reader's-side benchmark (bench/reader.py): its pure parts only. The
corpus it fills a store with must hold exactly the matches the bulk case and
the searches count on, and its ids must look like Beacon's; no timing is
asserted here.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from beacon.intake import new_id, schema_validator
from scripts import load_script

READER = Path(__file__).resolve().parent.parent / "bench" / "reader.py"


def load_module() -> ModuleType:
    return load_script(READER, "bench_reader")


reader = load_module()


def test_corpus_matches_exactly() -> None:
    """
    Exactly a tenth of the submissions hold both words of the bulk phrase
    (and no other holds either), exactly a hundredth the rare word; half
    are text, half structured.
    """
    docs = list(reader.corpus(3000))
    words = [reader.searchable_words(d.document) for d in docs]
    bulk = set(reader.BULK_PHRASE.split())
    assert sum(1 for w in words if bulk <= w) == 300
    assert sum(1 for w in words if bulk & w) == 300
    assert sum(1 for w in words if reader.RARE_WORD in w) == 30
    for query in reader.PAIR_QUERIES:
        pair = set(query.split())
        assert len(pair) == 2
        assert 0 < sum(1 for w in words if pair <= w) < 3000 // 5
    assert sum(1 for d in docs if "text" in d.document) == 1500
    assert [d.index for d in docs] == list(range(3000))


def test_corpus_is_fixed() -> None:
    """The same count gives the same submissions, run after run."""
    assert list(reader.corpus(500)) == list(reader.corpus(500))
    assert list(reader.corpus(500)) != list(reader.corpus(500, seed=reader.SEED + 1))


def test_corpus_is_realistic() -> None:
    """
    Structured submissions are valid against Beacon's schema; bodies are a
    few hundred bytes; the doors are the ones the CLI filters on.
    """
    validator = schema_validator()
    for doc in reader.corpus(400):
        if "message" in doc.document:
            assert list(validator.iter_errors(doc.document["message"])) == []
            body = doc.document["message"]["body"]
        else:
            body = doc.document["text"]
        assert 150 <= len(body.encode()) <= 800
        assert doc.door in ("jsonrpc", "native", "websocket", "http+json")


def test_ids_look_like_beacons() -> None:
    """
    36 base32hex digits starting with the millisecond of receipt, as
    beacon.intake.new_id writes them, so they sort by time.
    """
    rng = reader.random.Random(1)
    at = 1_764_614_327_123
    made = reader.bench_id(at, rng)
    assert re.fullmatch(r"[0-9a-v]{36}", made)
    assert made[:9] == new_id(at / 1000)[:9]
    assert reader.bench_id(at, rng) < reader.bench_id(at + 1, rng)


def test_goals_are_judged_on_p95() -> None:
    """A p95 over the bound is a goal missed, whatever the median."""
    run = reader.StoreRun("sqlite", 100_000)
    run.lists["first"] = reader.Timing([0.010] * 18 + [0.060, 0.070], 100_000)
    run.lists["rare"] = reader.Timing([0.020] * 20, 1000)
    lines = "\n".join(reader.goals([run]))
    assert "first page < 50 ms | sqlite | p95 60.0 ms (median 10.0) | **NO** |" in lines
    assert "--search licence` < 100 ms | sqlite | p95 20.0 ms (median 20.0) | yes |" in lines
    assert '--search "river garden"` < 100 ms | sqlite | n/a | n/a |' in lines


def test_fresh_searches_are_judged_on_their_median() -> None:
    """A search whose first calls on a server just started are slow misses its goal."""
    run = reader.StoreRun("postgresql", 100_000)
    run.lists["pair2"] = reader.Timing([0.008] * 50, 1699)
    run.fresh["pair2"] = reader.Timing([0.120, 0.118, 0.122, 0.004], 1699)
    lines = "\n".join(reader.goals([run]))
    assert '"garden spring"` < 100 ms | postgresql | p95 8.0 ms (median 8.0) | yes |' in lines
    assert ('"garden spring"` < 100 ms, fresh server | postgresql | median 119.0 ms (max 122.0) '
            "| **NO** |") in lines
