"""Nexmark on Stylus: the event generator (`generator`), the event types and their topics (`model`), writing
events to Kafka (`kafka`) and the reference results of the queries (`reference`). `docs/nexmark.md`."""

from stylus.nexmark.generator import GeneratorConfig, NexmarkGenerator, bids, generate
from stylus.nexmark.model import Auction, Bid, Event, Person, key_of, topics

__all__ = ["Auction", "Bid", "Event", "GeneratorConfig", "NexmarkGenerator", "Person", "bids", "generate",
           "key_of", "topics"]
