-- description: billable amount and billable hours x hourly rate per client per UTC month
-- columns: month date, client_id int, client_name string, entries bigint
-- columns: billable_amount decimal(20,2), billable_hours decimal(18,4)
-- columns: hourly_rate decimal(10,2), billable_hours_amount decimal(20,2)
-- incremental by: month
-- display order: month desc, billable_amount desc, client_id

-- Billable money per client per calendar month (UTC) of started_at, in exact decimals.
--
-- * billable_amount: the sum of time_entries.billable (numeric(10,2)) over every entry
--   started in the month, open ones included (the amount is recorded on the entry).
--   Each value is widened to DECIMAL(20,2) before summing, so the sum is DECIMAL(30,2)
--   on every engine and cannot overflow or lose scale (Sail does not enforce ANSI
--   overflow); it is stored as DECIMAL(20,2), and a value that does not fit fails the run.
-- * billable_hours: finished entries (stopped_at >= started_at) on projects with
--   billable = true, summed as exact microseconds, rounded once, half up, to 0.0001 h.
-- * billable_hours_amount = ROUND(billable_hours * hourly_rate, 2): the rounded hours times
--   the client's current hourly_rate (an exact DECIMAL product), rounded half up to the
--   cent once per client and month (not per entry). An invoice showing hours to four
--   places reproduces it. No decimal division anywhere: Sail and Spark give decimal
--   quotients different scales and Sail truncates where Spark rounds.
-- * Entries whose project or client is not (yet) in silver keep their money, under a
--   NULL client (and a NULL billable_hours_amount when the rate is unknown).
WITH entries AS (
    SELECT
        p.client_id,
        (unix_micros(e.started_at) - pmod(unix_micros(e.started_at), 86400000000))
            DIV 86400000000 AS epoch_day,
        CAST(e.billable AS DECIMAL(20,2)) AS billable,
        CASE
            WHEN e.stopped_at IS NOT NULL AND e.stopped_at >= e.started_at
                 AND COALESCE(p.billable, FALSE)
            THEN unix_micros(e.stopped_at) - unix_micros(e.started_at)
            ELSE 0
        END AS billable_micros
    FROM lakehouse_silver.time_entries e
    LEFT JOIN lakehouse_silver.projects p ON p.id = e.project_id
),
per_month AS (
    SELECT
        client_id,
        trunc(date_from_unix_date(CAST(epoch_day AS INT)), 'MM') AS month,
        COUNT(*) AS entries,
        SUM(billable) AS billable_amount,
        SUM(CAST(billable_micros AS DECIMAL(38,0))) AS billable_micros
    FROM entries
    GROUP BY client_id, trunc(date_from_unix_date(CAST(epoch_day AS INT)), 'MM')
),
hours AS (
    SELECT
        *,
        CAST((billable_micros + 180000) DIV 360000 AS DECIMAL(20,0)) * 0.0001 AS billable_hours
    FROM per_month
)
SELECT
    h.month,
    h.client_id,
    c.name AS client_name,
    h.entries,
    h.billable_amount,
    h.billable_hours,
    c.hourly_rate,
    ROUND(h.billable_hours * c.hourly_rate, 2) AS billable_hours_amount
FROM hours h
LEFT JOIN lakehouse_silver.clients c ON c.id = h.client_id
