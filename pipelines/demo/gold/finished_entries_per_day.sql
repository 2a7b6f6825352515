-- description: finished time entries per user, project and UTC day of started_at
-- columns: day date, user_id bigint, project_id int, entries bigint, micros decimal(38,0)
-- incremental by: day
-- display order: day desc, micros desc, user_id, project_id

-- The entry rules the hours reports share (they read this report):
--
-- * An entry counts whole on the UTC day it started, also when it runs past midnight.
-- * Open entries (stopped_at IS NULL) and entries that stop before they start are left out.
-- * The day comes from epoch microseconds, not to_date(): to_date() follows the session
--   time zone on Spark/Databricks (and Sail ignores that setting), the epoch does not.
-- * micros: the exact sum of the durations in microseconds, as DECIMAL(38,0) (bigint sums
--   wrap silently on Sail); the reports round it to hours once, after their own sums.
WITH finished AS (
    SELECT
        user_id,
        project_id,
        (unix_micros(started_at) - pmod(unix_micros(started_at), 86400000000))
            DIV 86400000000 AS epoch_day,
        unix_micros(stopped_at) - unix_micros(started_at) AS micros
    FROM lakehouse_silver.time_entries
    WHERE stopped_at IS NOT NULL AND stopped_at >= started_at
)
SELECT
    date_from_unix_date(CAST(epoch_day AS INT)) AS day,
    user_id,
    project_id,
    COUNT(*) AS entries,
    SUM(CAST(micros AS DECIMAL(38,0))) AS micros
FROM finished
GROUP BY epoch_day, user_id, project_id
