-- Nexmark q1, currency conversion: every bid with its price in euros (Flink's nexmark q1; Beam's SqlQuery1 calls
-- a DolToEur UDF). The rows of stylus/nexmark/reference.py:q1. Adaptations: docs/sql.md, "Nexmark as SQL apps".
CREATE APPLICATION nexmark_q1;

CREATE INPUT TABLE bid(auction, bidder, price, channel, url, dateTime, extra)
  FROM KAFKA('nexmark-bid') KEY auction TIME dateTime;

CREATE TABLE nexmark_q1 AS
  SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid;
