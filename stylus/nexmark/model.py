"""The three Nexmark event types as the JSON objects that go to Kafka, with the Nexmark model's field names, and
where each goes: three topics, one per type (`docs/nexmark.md`, "Topics and keys").

Why three topics and not Nexmark's unified `event` (one of person/auction/bid set): queries read one type
(`FROM KAFKA('nexmark-bid')`), so a per-type topic spares every stage a decode-and-drop of the other 8% of
events, and each type gets the key its joins need. Times (`dateTime`, `expires`) are ms since the epoch.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, TypedDict

Kind = Literal["person", "auction", "bid"]
KINDS: tuple[Kind, ...] = ("person", "auction", "bid")
DEFAULT_PREFIX = "nexmark"


class Person(TypedDict):
    id: int
    name: str
    emailAddress: str
    creditCard: str
    city: str
    state: str
    dateTime: int
    extra: str


class Auction(TypedDict):
    id: int
    itemName: str
    description: str
    initialBid: int  # cents
    reserve: int  # cents, above initialBid
    dateTime: int
    expires: int  # ms since the epoch, after dateTime
    seller: int  # a person's id
    category: int
    extra: str


class Bid(TypedDict):
    auction: int  # an auction's id
    bidder: int  # a person's id
    price: int  # cents
    channel: str
    url: str
    dateTime: int
    extra: str


class Event(NamedTuple):
    """One generated event: its type and its JSON object."""

    kind: Kind
    value: Any  # Person | Auction | Bid, by `kind`


def topics(prefix: str = DEFAULT_PREFIX) -> dict[Kind, str]:
    """The topic of each type: `<prefix>-person`, `<prefix>-auction`, `<prefix>-bid`."""
    return {kind: f"{prefix}-{kind}" for kind in KINDS}


def key_of(event: Event) -> str:
    """The record key: a person by its id, an auction by its id, a bid by its auction. Bids and auctions are
    then co-partitioned on the auction id (a bid joins its auction in the same partition), and every bid of an
    auction is in one partition, in order (a count per auction needs no shuffle)."""
    value = event.value
    return str(value["auction"] if event.kind == "bid" else value["id"])
