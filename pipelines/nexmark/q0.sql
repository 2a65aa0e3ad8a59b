-- Nexmark q0, pass-through: every bid, unchanged (Flink's nexmark q0; Beam's SqlQuery0 selects the whole row).
-- The rows of stylus/nexmark/reference.py:q0 (docs/nexmark.md). Adaptations: docs/sql.md, "Nexmark as SQL apps".
CREATE APPLICATION nexmark_q0;

CREATE INPUT TABLE bid(auction, bidder, price, channel, url, dateTime, extra)
  FROM KAFKA('nexmark-bid') KEY auction TIME dateTime;

CREATE TABLE nexmark_q0 AS
  SELECT auction, bidder, price, dateTime, extra FROM bid;
