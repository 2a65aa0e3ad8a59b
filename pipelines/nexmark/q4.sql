-- Nexmark q4, average closing price per category, in tumbling windows of 10 s (Flink's nexmark q4, Beam's
-- SqlQuery4, adapted to windows). The rows of stylus/nexmark/reference.py:q4.
--
-- The published query joins every auction with its bids between its creation and its expiry, takes each auction's
-- highest bid (its closing price: the nested GROUP BY A.id, A.category) and averages them per category (the outer
-- GROUP BY), over the whole streams, updated forever. Here both steps are windowed (docs/nexmark.md, section 5,
-- lists the adaptations): an auction meets the bids of its own 10-second window (a window join, grouped by the
-- auction: the join stage computes each closing price when the window closes), and the closing prices of a window
-- are averaged per category.
CREATE APPLICATION nexmark_q4;

CREATE INPUT TABLE auction(id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra)
  FROM KAFKA('nexmark-auction') KEY id TIME dateTime;

CREATE INPUT TABLE bid(auction, bidder, price, channel, url, dateTime, extra)
  FROM KAFKA('nexmark-bid') KEY auction TIME dateTime;

-- each auction's closing price: its highest bid in the auction's window while the auction is open
CREATE TABLE nexmark_q4_winning AS
  SELECT A.id AS auction, A.category, MAX(B.price) AS final
  FROM auction [10 seconds] A JOIN bid [10 seconds] B ON A.id = B.auction
  WHERE B.dateTime BETWEEN A.dateTime AND A.expires
  GROUP BY A.id, A.category;

CREATE TABLE nexmark_q4 AS
  SELECT category, AVG(final) AS avg_price
  FROM nexmark_q4_winning
  GROUP BY category, TUMBLE(window_end, INTERVAL '10' SECOND);
