-- Nexmark q7, highest bid: per tumbling window of 10 s, the bid(s) with the highest price (Beam's SqlQuery7 with
-- its default windowSizeSec 10). The rows of stylus/nexmark/reference.py:q7.
--
-- The published query groups the bids per window (B: GROUP BY every column and TUMBLE) and JOINs that with the
-- window's MAX(price) (B1) on `price = maxprice`. QUALIFY keeps the same rows on the grouping query itself, with
-- no second table and join: the bids whose price ranks first in their window, every tie included. Ranked by a
-- grouped column, each window keeps only its best bids so far, not every bid (docs/sql.md, "QUALIFY"); the app
-- runs as q7.partial (per bid partition) and q7 (merges the partitions' best of each window).
CREATE APPLICATION nexmark_q7;

CREATE INPUT TABLE bid(auction, bidder, price, channel, url, dateTime, extra)
  FROM KAFKA('nexmark-bid') KEY auction TIME dateTime;

CREATE TABLE nexmark_q7 AS
  SELECT auction, bidder, price, dateTime, extra,
         TUMBLE_START(dateTime, INTERVAL '10' SECOND) AS window_start,
         TUMBLE_END(dateTime, INTERVAL '10' SECOND) AS window_end
  FROM bid
  GROUP BY auction, bidder, price, dateTime, extra, TUMBLE(dateTime, INTERVAL '10' SECOND)
  QUALIFY RANK() OVER (PARTITION BY window_start, window_end ORDER BY price DESC) = 1;
