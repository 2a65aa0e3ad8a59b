"""The Nexmark generator: deterministic from its seed, 1:3:46, references to existing persons and recent auctions,
event time at the configured rate, the published model's fields and value ranges."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from stylus.nexmark import Event, GeneratorConfig, NexmarkGenerator, bids, generate, key_of, topics
from stylus.nexmark.generator import FIRST_AUCTION_ID, FIRST_PERSON_ID, HOT_BATCH
from stylus.nexmark.model import Auction, Bid, Person

EVENTS = 50_000  # 1,000 epochs of 50: 46,000 bids


@pytest.fixture(scope="module")
def events() -> list[Event]:
    return generate(EVENTS, GeneratorConfig(seed=11, rate=1_000))


def test_the_same_seed_gives_the_same_events_and_another_seed_others() -> None:
    first = generate(3_000, GeneratorConfig(seed=5))
    assert generate(3_000, GeneratorConfig(seed=5)) == first
    pieces = NexmarkGenerator(GeneratorConfig(seed=5))
    assert pieces.take(1_234) + pieces.take(1_766) == first  # how the stream is taken does not change it
    other = generate(3_000, GeneratorConfig(seed=6))
    assert [e.kind for e in other] == [e.kind for e in first]  # the type sequence is the model's, not random
    assert sum(a.value != b.value for a, b in zip(first, other, strict=True)) > 2_900


def test_proportions_are_one_three_forty_six(events: list[Event]) -> None:
    counts: Counter[str] = Counter(e.kind for e in events)
    assert sum(counts.values()) == EVENTS
    for kind, share in (("person", 1 / 50), ("auction", 3 / 50), ("bid", 46 / 50)):
        assert counts[kind] / EVENTS == pytest.approx(share, rel=0.01)
    # and in every run of 50 consecutive events, exactly
    assert {tuple(Counter(e.kind for e in events[i:i + 50]).values()) for i in range(0, EVENTS, 50)} == {(1, 3, 46)}


def test_event_time_advances_at_the_configured_rate(events: list[Event]) -> None:
    base = GeneratorConfig().base_time
    times = [e.value["dateTime"] for e in events]
    assert times == [base + n * 1_000 // 1_000 for n in range(EVENTS)]  # 1,000 events per second: 1 ms apart
    fast = [e.value["dateTime"] for e in generate(25_000, GeneratorConfig(rate=10_000, base_time=0))]
    assert all(a <= b for a, b in pairwise(fast))
    assert Counter(t // 1_000 for t in fast) == {0: 10_000, 1: 10_000, 2: 5_000}  # events per second of event time


def test_ids_are_dense_and_references_point_at_existing_people_and_recent_auctions(events: list[Event]) -> None:
    lead = GeneratorConfig().id_lead
    people, auctions = -1, -1  # the newest ids created so far
    referenced_people: set[int] = set()
    referenced_auctions: set[int] = set()
    for event in events:
        value = event.value
        if event.kind == "person":
            assert value["id"] == (people + 1 if people >= 0 else FIRST_PERSON_ID)
            people = value["id"]
        elif event.kind == "auction":
            assert value["id"] == (auctions + 1 if auctions >= 0 else FIRST_AUCTION_ID)
            auctions = value["id"]
            assert FIRST_PERSON_ID <= value["seller"] <= people + lead
            referenced_people.add(value["seller"])
        else:
            # one of the latest 100 auctions (in flight), or one of the next `lead` about to be created
            assert max(FIRST_AUCTION_ID, auctions - 100) <= value["auction"] <= auctions + lead
            assert FIRST_PERSON_ID <= value["bidder"] <= people + lead
            referenced_auctions.add(value["auction"])
            referenced_people.add(value["bidder"])
    assert referenced_people <= set(range(FIRST_PERSON_ID, people + lead + 1))
    # every id referenced ahead of its creation was created soon after (only the last `lead` may be missing)
    assert referenced_auctions - set(range(FIRST_AUCTION_ID, auctions + 1)) <= set(range(auctions + 1,
                                                                                         auctions + lead + 1))


def test_without_a_lead_every_reference_is_to_an_event_already_generated() -> None:
    people: set[int] = set()
    auctions: set[int] = set()
    for event in generate(20_000, GeneratorConfig(seed=2, id_lead=0)):
        value = event.value
        if event.kind == "person":
            people.add(value["id"])
        elif event.kind == "auction":
            assert value["seller"] in people
            auctions.add(value["id"])
        else:
            assert value["auction"] in auctions
            assert value["bidder"] in people


def test_half_the_bids_go_to_the_hot_auction(events: list[Event]) -> None:
    hot = 0
    newest = 0
    for event in events:
        if event.kind == "auction":
            newest = event.value["id"] - FIRST_AUCTION_ID
        elif event.kind == "bid":
            hot += event.value["auction"] == newest // HOT_BATCH * HOT_BATCH + FIRST_AUCTION_ID
    # 1 - 1/hot_auction_ratio of the bids, plus the random ones that hit it
    assert 0.50 <= hot / len(bids(events)) <= 0.52


def test_fields_and_values_follow_the_model(events: list[Event]) -> None:
    fields = {"person": set(Person.__annotations__), "auction": set(Auction.__annotations__),
              "bid": set(Bid.__annotations__)}
    assert fields["bid"] == {"auction", "bidder", "price", "channel", "url", "dateTime", "extra"}
    for event in events:
        assert set(event.value) == fields[event.kind]
    auctions = [e.value for e in events if e.kind == "auction"]
    assert all(a["dateTime"] < a["expires"] and a["initialBid"] < a["reserve"] for a in auctions)
    assert {a["category"] for a in auctions} == {10, 11, 12, 13, 14}
    prices = [b["price"] for b in bids(events)]
    assert min(prices) >= 100 and max(prices) <= 100_000_000  # $1 .. $1,000,000 in cents
    channels = Counter(b["channel"] for b in bids(events))
    assert sum(channels[c] for c in ("Google", "Facebook", "Baidu", "Apple")) / len(prices) == pytest.approx(0.5,
                                                                                                           abs=0.02)
    urls: dict[str, set[str]] = {}
    for b in bids(events):
        urls.setdefault(b["channel"], set()).add(b["url"])
    assert all(len(u) == 1 for u in urls.values())  # a channel always has the same URL
    people = [e.value for e in events if e.kind == "person"]
    assert {p["state"] for p in people} <= {"AZ", "CA", "ID", "OR", "WA", "WY"}
    # padding to the published average sizes (person 200, auction 500, bid 100 bytes of fields)
    assert sum(len(b["extra"]) for b in bids(events)) / len(prices) == pytest.approx(68, rel=0.05)


def test_topics_and_keys() -> None:
    assert topics() == {"person": "nexmark-person", "auction": "nexmark-auction", "bid": "nexmark-bid"}
    assert topics("x") == {"person": "x-person", "auction": "x-auction", "bid": "x-bid"}
    person, auction, bid = generate(5)[0], generate(5)[1], generate(5)[4]
    assert (key_of(person), key_of(auction), key_of(bid)) == (str(person.value["id"]), str(auction.value["id"]),
                                                            str(bid.value["auction"]))


def test_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="rate"):
        GeneratorConfig(rate=0)
    with pytest.raises(ValueError, match="proportion"):
        GeneratorConfig(bid_proportion=0)
