-- Nexmark q3, local item suggestion: the auctions of category 10 whose seller lives in Oregon, Idaho or California,
-- with the seller's name, city and state (Flink's nexmark q3, Beam's SqlQuery3). The rows of
-- stylus/nexmark/reference.py:q3.
--
-- A lookup join: `person` is not an input table of this app but a table of the pipeline (sql.yaml, `tables:`: the
-- topic nexmark-person materialised by id, every instance holding all of it), so each auction looks its seller up
-- as it is processed (docs/sql.md, "Joins"). Why a table and not a window join: a seller is usually created long
-- before the auction (q3 pairs every auction with its seller, whenever the seller was created), and a person is
-- dimension data, read by key. The published query is a regular join that keeps both streams forever.
CREATE APPLICATION nexmark_q3;

CREATE INPUT TABLE auction(id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra)
  FROM KAFKA('nexmark-auction') KEY id TIME dateTime;

CREATE TABLE nexmark_q3 AS
  SELECT P.name, P.city, P.state, A.id
  FROM auction AS A JOIN person AS P ON A.seller = P.id
  WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA');
