"""A deterministic Nexmark event generator: persons, auctions and bids in the proportions 1:3:46, event time
advancing at a fixed rate, the same events for the same seed.

It follows the model of the published generators (Apache Beam's `sdks/java/testing/nexmark` and the
`nexmark/nexmark` Flink port, `NexmarkGenerator` and its `PersonGenerator`, `AuctionGenerator`,
`BidGenerator`, `PriceGenerator`, `StringsGenerator`), so queries see the data they were designed for:

- Event number n (from 0) is a person, an auction or a bid by `n % 50` (0: person, 1-3: auction, the rest
  bid); its event time is `base_time + n * 1000 // rate` ms, so event time never goes back.
- Ids are dense and ascending from 1000: the n-th person has id 1000 + its rank, likewise auctions. A
  reference to a person or an auction picks among the recent ones ("active" people, auctions "in flight"),
  plus up to `id_lead` ids not created yet (the published model's PERSON_ID_LEAD / AUCTION_ID_LEAD: a bid
  may arrive just before its auction); `id_lead=0` refers to created ones only.
- Hot items: a bid goes to the hot auction (the first of the latest batch of 100 auctions) with probability
  1 - 1/hot_auction_ratio, else to a random in-flight one; a bid is by the hot bidder (the second person of
  the latest batch of 100) with probability 1 - 1/hot_bidders_ratio; an auction is by the hot seller (the
  first person of that batch) with probability 1 - 1/hot_sellers_ratio.
- Prices are log-uniform over $1 .. $1,000,000 in cents (`round(10 ** (6 u) * 100)`); an auction's reserve
  is its initial bid plus another such price; it expires after a random length averaging the time it takes
  to create `num_in_flight_auctions` more auctions; its category is one of 5 (10-14).
- Strings: names, cities and states from the published lists, random lower-case words for item names,
  descriptions and e-mails, and `extra` padding each event to the published average sizes (person 200
  bytes, auction 500, bid 100). A bid's channel is one of four hot channels half the time, else one of
  10,000 `channel-N`, each with its URL.

Differences, and why: one random stream per generator (seeded) instead of one `java.util.Random` per event
id, so values differ from the Java generator's while following the same distributions; random strings are
cut from a seeded pool of random characters (the same distribution, a fraction of the cost per event in
Python); the hot bidder is the second person of the batch only once that person exists (the published one may
name a person one event ahead of creation). Parameter names and defaults are Nexmark's (`docs/nexmark.md`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from stylus.nexmark.model import Auction, Bid, Event, Person

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_BATCH = 100  # hot sellers, bidders and auctions are the first of each batch of this many
DEFAULT_BASE_TIME = 1_700_000_000_000  # ms; fixed, so runs with one seed give the same events

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent",
             "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
HOT_CHANNELS_RATIO = 2  # a bid comes from a hot channel with probability 1 - 1/2
CHANNELS = 10_000

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_POOL = 1 << 16  # characters in each pool of random text


@dataclass(frozen=True)
class GeneratorConfig:
    """What the events look like; defaults are the published NexmarkConfiguration's."""

    seed: int = 0
    rate: int = 10_000  # events per second of event time (Nexmark's firstEventRate)
    base_time: int = DEFAULT_BASE_TIME  # event time of event 0, ms since the epoch
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    id_lead: int = 10  # ids not created yet that a reference may name (PERSON_ID_LEAD, AUCTION_ID_LEAD)
    avg_person_bytes: int = 200
    avg_auction_bytes: int = 500
    avg_bid_bytes: int = 100

    def __post_init__(self) -> None:
        if self.rate < 1:
            raise ValueError("rate must be at least 1 event per second")
        if min(self.person_proportion, self.auction_proportion, self.bid_proportion) < 1:
            raise ValueError("every proportion must be at least 1")
        if self.id_lead < 0:
            raise ValueError("id_lead must be >= 0")

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    def timestamp(self, n: int) -> int:
        """Event time of event number `n`, ms."""
        return self.base_time + n * 1000 // self.rate

    def kind(self, n: int) -> str:
        rem = n % self.total_proportion
        if rem < self.person_proportion:
            return "person"
        return "auction" if rem < self.person_proportion + self.auction_proportion else "bid"

    def last_person(self, n: int) -> int:
        """The newest person (0-based rank) as of event `n`: the one `n` creates, if it is a person."""
        epoch, offset = divmod(n, self.total_proportion)
        return epoch * self.person_proportion + min(offset, self.person_proportion - 1)

    def last_auction(self, n: int) -> int:
        """The newest auction (0-based rank) as of event `n`; -1 before the first."""
        epoch, offset = divmod(n, self.total_proportion)
        if offset < self.person_proportion:
            epoch, offset = epoch - 1, self.auction_proportion - 1
        elif offset >= self.person_proportion + self.auction_proportion:
            offset = self.auction_proportion - 1
        else:
            offset -= self.person_proportion
        return epoch * self.auction_proportion + offset


class NexmarkGenerator:
    """An iterator of `Event`s from event number 0; the same config gives the same events."""

    def __init__(self, config: GeneratorConfig | None = None) -> None:
        self.config = cfg = config or GeneratorConfig()
        self.rng = rng = random.Random(cfg.seed)
        self.n = 0  # the next event number
        self._letters = "".join(rng.choices(_LETTERS, k=_POOL))
        # a space with probability 1/13, as StringsGenerator.nextString
        self._words = "".join(rng.choices(_LETTERS + " ", weights=[12] * 26 + [26], k=_POOL))
        self._hot_urls = tuple(self._url() for _ in HOT_CHANNELS)
        self._channels: dict[int, tuple[str, str]] = {}
        # how many events it takes to create num_in_flight_auctions more auctions (for auction lengths)
        self._in_flight_events = cfg.num_in_flight_auctions * cfg.total_proportion // cfg.auction_proportion

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        cfg, n = self.config, self.n
        self.n = n + 1
        kind = cfg.kind(n)
        if kind == "bid":
            return Event("bid", self._bid(n))
        if kind == "auction":
            return Event("auction", self._auction(n))
        return Event("person", self._person(n))

    def take(self, count: int) -> list[Event]:
        """The next `count` events."""
        return [next(self) for _ in range(count)]

    # ---------------------------------------------------------------- the three types
    def _person(self, n: int) -> Person:
        rng = self.rng
        name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        email = f"{self._string(7)}@{self._string(5)}.com"
        card = " ".join(f"{rng.randrange(10_000):04d}" for _ in range(4))
        city, state = rng.choice(US_CITIES), rng.choice(US_STATES)
        size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
        return {"id": self.config.last_person(n) + FIRST_PERSON_ID, "name": name, "emailAddress": email,
                "creditCard": card, "city": city, "state": state, "dateTime": self.config.timestamp(n),
                "extra": self._extra(size, self.config.avg_person_bytes)}

    def _auction(self, n: int) -> Auction:
        cfg, rng = self.config, self.rng
        timestamp = cfg.timestamp(n)
        if rng.randrange(cfg.hot_sellers_ratio) > 0:
            seller = cfg.last_person(n) // HOT_BATCH * HOT_BATCH
        else:
            seller = self._some_person(n)
        category = FIRST_CATEGORY_ID + rng.randrange(NUM_CATEGORIES)
        initial = self._price()
        horizon = cfg.timestamp(n + self._in_flight_events) - timestamp  # lengths average this
        expires = timestamp + 1 + rng.randrange(max(horizon * 2, 1))
        name, description = self._string(20), self._string(100)
        reserve = initial + self._price()
        size = 8 + len(name) + len(description) + 40
        return {"id": cfg.last_auction(n) + FIRST_AUCTION_ID, "itemName": name, "description": description,
                "initialBid": initial, "reserve": reserve, "dateTime": timestamp, "expires": expires,
                "seller": seller + FIRST_PERSON_ID, "category": category,
                "extra": self._extra(size, cfg.avg_auction_bytes)}

    def _bid(self, n: int) -> Bid:
        cfg, rng = self.config, self.rng
        if rng.randrange(cfg.hot_auction_ratio) > 0:
            auction = cfg.last_auction(n) // HOT_BATCH * HOT_BATCH
        else:
            newest = cfg.last_auction(n)
            oldest = max(newest - cfg.num_in_flight_auctions, 0)
            auction = oldest + rng.randrange(newest - oldest + 1 + cfg.id_lead)
        if rng.randrange(cfg.hot_bidders_ratio) > 0:
            newest = cfg.last_person(n)
            bidder = min(newest // HOT_BATCH * HOT_BATCH + 1, newest)
        else:
            bidder = self._some_person(n)
        price = self._price()
        if rng.randrange(HOT_CHANNELS_RATIO) > 0:
            i = rng.randrange(len(HOT_CHANNELS))
            channel, url = HOT_CHANNELS[i], self._hot_urls[i]
        else:
            channel, url = self._channel(rng.randrange(CHANNELS))
        return {"auction": auction + FIRST_AUCTION_ID, "bidder": bidder + FIRST_PERSON_ID, "price": price,
                "channel": channel, "url": url, "dateTime": cfg.timestamp(n),
                "extra": self._extra(32, cfg.avg_bid_bytes)}

    # ---------------------------------------------------------------- parts
    def _some_person(self, n: int) -> int:
        """A random active person (0-based rank), or one of the next `id_lead` to be created."""
        cfg = self.config
        people = cfg.last_person(n) + 1
        active = min(people, cfg.num_active_people)
        return people - active + self.rng.randrange(active + cfg.id_lead)

    def _price(self) -> int:
        return int(10.0 ** (self.rng.random() * 6.0) * 100.0 + 0.5)  # Java's Math.round

    def _string(self, max_length: int) -> str:
        """Random words of 3 to max_length - 1 characters, trimmed (StringsGenerator.nextString)."""
        length = 3 + self.rng.randrange(max_length - 3)
        start = self.rng.randrange(_POOL - length)
        return self._words[start:start + length].strip()

    def _extra(self, size: int, average: int) -> str:
        """Letters that bring an event of `size` bytes to `average` on average, +-20% (nextExtra)."""
        if size > average:
            return ""
        wanted = average - size
        delta = round(wanted * 0.2)
        length = wanted - delta + (self.rng.randrange(2 * delta) if delta else 0)
        start = self.rng.randrange(_POOL - length)
        return self._letters[start:start + length]

    def _url(self, rng: random.Random | None = None) -> str:
        rng = rng or self.rng
        parts = []
        for _ in range(3):
            length = 3 + rng.randrange(2)
            start = rng.randrange(_POOL - length)
            parts.append(self._words[start:start + length].strip().replace(" ", "_") or "x")
        return f"https://www.nexmark.com/{parts[0]}/{parts[1]}/{parts[2]}/item.htm?query=1"

    def _channel(self, number: int) -> tuple[str, str]:
        """Channel `number`'s name and URL, the same every time it is drawn (9 in 10 carry a channel id)."""
        found = self._channels.get(number)
        if found is None:
            rng = random.Random(f"{self.config.seed}/channel/{number}")  # str seeds do not depend on hashing
            url = self._url(rng)
            if rng.randrange(10) > 0:
                url += f"&channel_id={abs(_reverse32(number))}"
            found = self._channels[number] = (f"channel-{number}", url)
        return found


def _reverse32(value: int) -> int:
    """Java's Integer.reverse: the 32 bits in reverse order, as a signed int."""
    bits = int(f"{value & 0xFFFFFFFF:032b}"[::-1], 2)
    return bits - (1 << 32) if bits >= 1 << 31 else bits


def generate(count: int, config: GeneratorConfig | None = None) -> list[Event]:
    """The first `count` events of a generator with `config`."""
    return NexmarkGenerator(config).take(count)


def bids(events: list[Event]) -> list[Bid]:
    """The bids among `events`, in order: what the queries read."""
    return [event.value for event in events if event.kind == "bid"]
