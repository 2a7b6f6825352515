-- description: distinct users with at least one time entry per UTC day of started_at
-- columns: day date, active_users bigint
-- incremental by: day
-- display order: day desc

-- Distinct users with at least one time entry started on the UTC day.
--
-- * Every entry counts, open ones (stopped_at IS NULL) included: starting a timer is
--   activity. An entry running past midnight counts on the day it started only.
-- * Days without any entry have no row (there is no calendar table in the source).
-- * The day comes from epoch microseconds, independent of the session time zone.
WITH started AS (
    SELECT
        user_id,
        (unix_micros(started_at) - pmod(unix_micros(started_at), 86400000000))
            DIV 86400000000 AS epoch_day
    FROM lakehouse_silver.time_entries
)
SELECT
    date_from_unix_date(CAST(epoch_day AS INT)) AS day,
    COUNT(DISTINCT user_id) AS active_users
FROM started
GROUP BY epoch_day
