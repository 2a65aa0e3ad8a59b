-- The paper's Figure 2 ("Realtime Data Processing at Facebook", SIGMOD 2016): the Ranker of the trending
-- pipeline as a Puma app. Every 5 minutes of event time, the top events of each category by score.
-- Puma read Scribe: SCRIBE("events_stream") is accepted as a synonym of KAFKA('events_stream').
CREATE APPLICATION top_events;

CREATE INPUT TABLE events_score(event_time, event, category, score)
  FROM KAFKA('events_stream') TIME event_time;

-- No GROUP BY (Puma's form): the non-aggregated columns group the rows, and topk ranks them. Per category,
-- the 10 events with the highest score (each event's best score in the window), one row each, when the
-- window closes: {category, event, score, window_start, window_end}. docs/sql.md, "topk".
CREATE TABLE top_events_5min AS
  SELECT category, event, topk(score) AS score
  FROM events_score [5 minutes];
