-- description: hours of finished time entries per user per ISO week (UTC)
-- columns: iso_year int, iso_week int, week_start date, user_id bigint, email string
-- columns: full_name string, entries bigint, hours decimal(18,4)
-- display order: week_start desc, hours desc, user_id

-- Hours of finished time entries per user per ISO 8601 week of the UTC day of started_at.
--
-- * Which entries count and on which day: finished_entries_per_day.sql.
-- * ISO weeks start on Monday; week 1 is the week holding the year's first Thursday, so
--   2027-01-03 (a Sunday) is in 2026-W53 and 2024-12-30 (a Monday) in 2025-W01. Computed
--   from the epoch day (1970-01-01 was a Thursday) because Sail's weekday() returns -1
--   for Sundays and Sail has no EXTRACT(YEAROFWEEK ...): the ISO year is the calendar
--   year of the week's Thursday, the ISO week is that Thursday's day of year DIV 7, plus 1.
-- * Hours: exact microseconds, rounded once half up to 0.0001 h (integer DIV).
WITH per_week AS (
    SELECT
        user_id,
        unix_date(day) - pmod(unix_date(day) + 3, 7) AS monday,  -- pmod(.., 7): 0 = Monday
        SUM(entries) AS entries,
        SUM(micros) AS micros
    FROM lakehouse_gold.finished_entries_per_day
    GROUP BY user_id, unix_date(day) - pmod(unix_date(day) + 3, 7)
)
SELECT
    year(date_from_unix_date(CAST(w.monday + 3 AS INT))) AS iso_year,
    (dayofyear(date_from_unix_date(CAST(w.monday + 3 AS INT))) - 1) DIV 7 + 1 AS iso_week,
    date_from_unix_date(CAST(w.monday AS INT)) AS week_start,
    w.user_id,
    u.email,
    u.full_name,
    w.entries,
    CAST((w.micros + 180000) DIV 360000 AS DECIMAL(20,0)) * 0.0001 AS hours
FROM per_week w
LEFT JOIN lakehouse_silver.users u ON u.id = w.user_id
