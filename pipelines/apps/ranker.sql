-- The trending pipeline's Ranker (processors/trending.py: Ranker) as a Puma app beside the Python one
-- (pipelines/trending_events_sql.yaml): per topic and 30-second bucket of event time, the 5 events with the best
-- score above 0 (min_score), one row per ranked event when the bucket closes. The paper's Figure 2 over the
-- Scorer's output. The Scorer keys `scored` by topic, so the ranking needs no shuffle (KEY topic).
CREATE APPLICATION ranker;

CREATE INPUT TABLE scored(event_id, topic, score, count, ts)
  FROM KAFKA('scored') KEY topic TIME ts;

CREATE TABLE ranked_sql AS
  SELECT topic, event_id, topk(score, 5) AS score
  FROM scored [30 seconds]
  WHERE score > 0;
