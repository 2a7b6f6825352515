-- description: hours of finished time entries per project per UTC day of started_at
-- columns: day date, project_id int, project_name string, client_id int
-- columns: client_name string, entries bigint, hours decimal(18,4)
-- display order: day desc, hours desc, project_id

-- Hours of finished time entries per project per UTC day of started_at.
--
-- * Which entries count and on which day: finished_entries_per_day.sql.
-- * The exact microseconds are summed, then rounded once, half up, to 0.0001 h with
--   integer DIV (decimal division has different result scales on Sail and Spark).
-- * Projects or clients not (yet) in silver keep their hours, with NULL names.
WITH per_day AS (
    SELECT
        day,
        project_id,
        SUM(entries) AS entries,
        SUM(micros) AS micros
    FROM lakehouse_gold.finished_entries_per_day
    GROUP BY day, project_id
)
SELECT
    d.day,
    d.project_id,
    p.name AS project_name,
    p.client_id,
    c.name AS client_name,
    d.entries,
    CAST((d.micros + 180000) DIV 360000 AS DECIMAL(20,0)) * 0.0001 AS hours
FROM per_day d
LEFT JOIN lakehouse_silver.projects p ON p.id = d.project_id
LEFT JOIN lakehouse_silver.clients c ON c.id = p.client_id
