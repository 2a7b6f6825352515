-- description: hours of finished time entries per project per UTC day of started_at
-- columns: day date, project_id int, project_name string, client_id int
-- columns: client_name string, entries bigint, hours decimal(18,4)
-- display order: day desc, hours desc, project_id

-- Hours of finished time entries per project per UTC day of started_at.
--
-- * An entry counts whole on the UTC day it started, also when it runs past midnight.
-- * Open entries (stopped_at IS NULL) and entries that stop before they start are left out.
-- * The day comes from epoch microseconds, not to_date(): to_date() follows the session
--   time zone on Spark/Databricks (and Sail ignores that setting), the epoch does not.
-- * Durations are summed as exact microseconds (DECIMAL(38,0): bigint sums wrap silently
--   on Sail) and rounded once, half up, to 0.0001 h with integer DIV (decimal division
--   has different result scales on Sail and Spark).
-- * Projects or clients not (yet) in silver keep their hours, with NULL names.
WITH finished AS (
    SELECT
        user_id,
        project_id,
        (unix_micros(started_at) - pmod(unix_micros(started_at), 86400000000))
            DIV 86400000000 AS epoch_day,
        unix_micros(stopped_at) - unix_micros(started_at) AS micros
    FROM lakehouse_silver.time_entries
    WHERE stopped_at IS NOT NULL AND stopped_at >= started_at
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
LEFT JOIN lakehouse_silver.projects p ON p.id = d.project_id
LEFT JOIN lakehouse_silver.clients c ON c.id = p.client_id
