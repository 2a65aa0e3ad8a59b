-- Nexmark q5, hot items: per hopping window of 10 s every 5 s, the auction(s) with the most bids (Beam's
-- SqlQuery5 with its default windowSizeSec 10 and windowPeriodSec 5). The rows of stylus/nexmark/reference.py:q5.
--
-- The published query counts bids per auction and window (AuctionBids) and JOINs that with the maximum count
-- of each window (MaxBids) on `num >= maxnum`, a join without an equality (the dialect's joins need one); QUALIFY
-- keeps the same rows on the counting query itself: the auctions whose count ranks first in their window, every tie included. The app
-- runs as two processors (docs/sql.md, "QUALIFY"): q5.partial counts and ranks per bid partition (bids are
-- keyed by auction: KEY auction, so no shuffle), q5 merges the partitions' leaders of each window.
CREATE APPLICATION nexmark_q5;

CREATE INPUT TABLE bid(auction, bidder, price, channel, url, dateTime, extra)
  FROM KAFKA('nexmark-bid') KEY auction TIME dateTime;

CREATE TABLE nexmark_q5 AS
  SELECT auction, COUNT(*) AS num,
         HOP_START(dateTime, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS window_start,
         HOP_END(dateTime, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS window_end
  FROM bid
  GROUP BY auction, HOP(dateTime, INTERVAL '5' SECOND, INTERVAL '10' SECOND)
  QUALIFY RANK() OVER (PARTITION BY window_start, window_end ORDER BY num DESC) = 1;
