-- Finished time entries: the entry rules every hours report shares (ReportSpec.sql()
-- puts this query where a report names the fragment).
-- * An entry counts whole on the UTC day it started, also when it runs past midnight.
-- * Open entries (stopped_at IS NULL) and entries that stop before they start are left out.
-- * The day comes from epoch microseconds, not to_date(): to_date() follows the session
--   time zone on Spark/Databricks (and Sail ignores that setting), the epoch does not.
SELECT
    user_id,
    project_id,
    (unix_micros(started_at) - pmod(unix_micros(started_at), 86400000000))
        DIV 86400000000 AS epoch_day,
    unix_micros(stopped_at) - unix_micros(started_at) AS micros
FROM time_entries
WHERE stopped_at IS NOT NULL AND stopped_at >= started_at
