package eventstatus

// Every statement the report runs. Each takes the event id as $1 (a uuid;
// the callers check its form first, so a typo is ErrUnknownEvent, not a
// Postgres cast error).

// sqlOwner is the authorization lookup: one row by primary key or unique
// index, never a scan. A run is preferred over its material as LoadFanout
// prefers it (an event planned from another source has no material); the
// LEFT JOIN keeps an event whose course is gone (owner without
// instructor). UNION ALL with LIMIT 1 stops at the first branch that
// answers.
const sqlOwner = `
SELECT e.course_id::text, c.instructor_id::text
FROM (
  SELECT course_id FROM fanout_runs WHERE event_id = $1
  UNION ALL
  SELECT course_id FROM materials WHERE event_id = $1
  LIMIT 1
) e LEFT JOIN courses c ON c.id = e.course_id`

// The fan-out's progress: its run, else (not planned yet) its material,
// and the run's ranges.
const (
	sqlFanoutRun = `
SELECT course_id::text, material_id::text, title, published_at, ranges, slice_size,
       started_at, finished_at, notified, now(), state, send_at, expires_at
FROM fanout_runs WHERE event_id = $1`

	sqlFanoutMaterial = `
SELECT course_id::text, id::text, title, published_at FROM materials WHERE event_id = $1`

	sqlFanoutRanges = `
SELECT lo::text, hi::text, cursor::text, slices_done, notified, done_at IS NOT NULL
FROM fanout_ranges WHERE event_id = $1`
)

// sqlPushCounters sums the event's counter shards (≤ 32 rows by primary
// key prefix).
const sqlPushCounters = `
SELECT
  coalesce(sum(notified), 0)::bigint,
  coalesce(sum(targeted), 0)::bigint, coalesce(sum(delivered), 0)::bigint, coalesce(sum(gone), 0)::bigint,
  coalesce(sum(failed), 0)::bigint, coalesce(sum(retrying), 0)::bigint,
  coalesce(sum(cancelled), 0)::bigint, coalesce(sum(expired), 0)::bigint,
  coalesce(sum(not_configured), 0)::bigint
FROM event_counters WHERE event_id = $1`

// Verify's terms, recomputed from the rows, each on its own so that a
// mistake in one cannot hide in another.
const (
	sqlVerifyNotified = `SELECT count(*) FROM notifications WHERE event_id = $1`

	sqlVerifyCurrent = `
SELECT count(*) FROM notifications n JOIN push_subscriptions s ON s.user_id = n.user_id WHERE n.event_id = $1`

	sqlVerifyOrphaned = `
SELECT count(*) FROM push_deliveries d WHERE d.event_id = $1
  AND NOT EXISTS (SELECT 1 FROM push_subscriptions s WHERE s.id = d.subscription_id)`

	sqlVerifyUnsent = `
SELECT count(*) FROM notifications n JOIN push_subscriptions s ON s.user_id = n.user_id
WHERE n.event_id = $1 AND NOT EXISTS (SELECT 1 FROM push_deliveries d WHERE d.event_id = $1 AND d.subscription_id = s.id)`

	sqlVerifyStrangers = `
SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
WHERE d.event_id = $1 AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.event_id = $1 AND n.user_id = s.user_id)`

	sqlVerifyGoneAlive = `
SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
WHERE d.event_id = $1 AND d.status = 'gone'`

	sqlVerifyOdd = `
SELECT count(*) FROM push_deliveries WHERE event_id = $1
  AND (status NOT IN ('delivered', 'gone', 'failed', 'retrying', 'cancelled', 'expired') OR attempts < 0)`

	sqlVerifyNotConfigured = `
SELECT count(*) FROM push_deliveries
WHERE event_id = $1 AND status = 'failed' AND error LIKE 'provider_not_configured%'`

	sqlVerifyByStatus = `
SELECT status, count(*) FROM push_deliveries WHERE event_id = $1 GROUP BY status`
)
