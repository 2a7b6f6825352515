-- Hours of finished time entries per project per UTC day of started_at.
--
-- * Which entries count and on which day: sql/finished_entries.sql.
-- * Durations are summed as exact microseconds (DECIMAL(38,0): bigint sums wrap silently
--   on Sail) and rounded once, half up, to 0.0001 h with integer DIV (decimal division
--   has different result scales on Sail and Spark).
-- * Projects or clients not (yet) in silver keep their hours, with NULL names.
WITH finished AS (
{finished_entries}
),
per_day AS (
    SELECT
        project_id,
        epoch_day,
        COUNT(*) AS entries,
        SUM(CAST(micros AS DECIMAL(38,0))) AS micros
    FROM finished
    GROUP BY project_id, epoch_day
)
SELECT
    date_from_unix_date(CAST(d.epoch_day AS INT)) AS day,
    d.project_id,
    p.name AS project_name,
    p.client_id,
    c.name AS client_name,
    d.entries,
    CAST((d.micros + 180000) DIV 360000 AS DECIMAL(20,0)) * 0.0001 AS hours
FROM per_day d
LEFT JOIN projects p ON p.id = d.project_id
LEFT JOIN clients c ON c.id = p.client_id
