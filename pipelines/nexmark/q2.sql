-- Nexmark q2, selection: the bids of every 123rd auction (Flink's nexmark q2 and Beam's SqlQuery2, auctionSkip
-- 123). The rows of stylus/nexmark/reference.py:q2. Adaptations: docs/sql.md, "Nexmark as SQL apps".
CREATE APPLICATION nexmark_q2;

CREATE INPUT TABLE bid(auction, bidder, price, channel, url, dateTime, extra)
  FROM KAFKA('nexmark-bid') KEY auction TIME dateTime;

CREATE TABLE nexmark_q2 AS
  SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;
