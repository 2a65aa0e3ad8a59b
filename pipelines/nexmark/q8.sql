-- Nexmark q8, monitor new users: the persons who created an auction in the tumbling window of 10 s they were created
-- in (Flink's nexmark q8, Beam's SqlQuery8 with windowSizeSec 10). The rows of stylus/nexmark/reference.py:q8.
--
-- A window join: both streams in the same 10-second window, paired by the person's id and the auction's seller when
-- the window closes (docs/sql.md, "Joins"). The published query groups each stream per window first (the persons by
-- id and name, the auctions by seller) and joins the groups on the id and the window bounds; here the join pairs
-- the rows and groups the pairs by the person, which gives the same rows: one per new user with an auction.
CREATE APPLICATION nexmark_q8;

CREATE INPUT TABLE person(id, name, emailAddress, creditCard, city, state, dateTime, extra)
  FROM KAFKA('nexmark-person') KEY id TIME dateTime;

CREATE INPUT TABLE auction(id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra)
  FROM KAFKA('nexmark-auction') KEY id TIME dateTime;

CREATE TABLE nexmark_q8 AS
  SELECT P.id, P.name
  FROM person [10 seconds] P JOIN auction [10 seconds] A ON P.id = A.seller
  GROUP BY P.id, P.name;
