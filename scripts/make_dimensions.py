"""Write processors/data/dimensions.jsonl: the dimension table the Joiner looks up (run once, committed).

One JSON object per line, sorted by dim_id: {"dim_id": 1, "country": "BR", "language": "pt", "segment": "teen"}.
Seeded, so running it again reproduces the committed file byte for byte.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

COUNTRIES = {"US": "en", "GB": "en", "IN": "hi", "BR": "pt", "DE": "de", "FR": "fr", "JP": "ja", "MX": "es",
             "ES": "es", "ID": "id", "NG": "en", "KR": "ko", "IT": "it", "CA": "en", "AU": "en", "PL": "pl"}
SEGMENTS = ("teen", "young_adult", "adult", "senior", "business", "creator")
ROWS = 300


def main(path: str = "processors/data/dimensions.jsonl") -> None:
    rng = random.Random(1234)
    countries = list(COUNTRIES)
    with Path(path).open("w") as out:
        for dim_id in range(1, ROWS + 1):
            country = rng.choice(countries)
            row = {"dim_id": dim_id, "country": country, "language": COUNTRIES[country],
                   "segment": rng.choice(SEGMENTS)}
            out.write(json.dumps(row, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
