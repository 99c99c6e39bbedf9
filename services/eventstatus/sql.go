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
       started_at, finished_at, notified, now()
FROM fanout_runs WHERE event_id = $1`

	sqlFanoutMaterial = `
SELECT course_id::text, id::text, title, published_at FROM materials WHERE event_id = $1`

	sqlFanoutRanges = `
SELECT lo::text, hi::text, cursor::text, slices_done, notified, done_at IS NOT NULL
FROM fanout_ranges WHERE event_id = $1`
)

// sqlPushCounts is one statement, hence one consistent snapshot. The FULL
// JOIN pairs current subscriptions of notified students with the event's
// recorded outcomes; a row on either side is one target subscription.
const sqlPushCounts = `
WITH subs AS (
  SELECT s.id FROM notifications n JOIN push_subscriptions s ON s.user_id = n.user_id
  WHERE n.event_id = $1
), d AS (
  SELECT subscription_id, status FROM push_deliveries WHERE event_id = $1
)
SELECT
  (SELECT count(*) FROM notifications WHERE event_id = $1),
  count(*),
  count(*) FILTER (WHERE d.status = 'delivered'),
  count(*) FILTER (WHERE d.status = 'gone'),
  count(*) FILTER (WHERE d.status = 'failed'),
  count(*) FILTER (WHERE d.status = 'retrying'),
  count(*) FILTER (WHERE d.status IS NULL)
FROM subs FULL JOIN d ON d.subscription_id = subs.id`

// Verify's terms, each counted on its own so that a mistake in
// sqlPushCounts cannot hide in the same statement.
const (
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
  AND (status NOT IN ('delivered', 'gone', 'failed', 'retrying') OR attempts < 0)`

	sqlVerifyByStatus = `
SELECT status, count(*) FROM push_deliveries WHERE event_id = $1 GROUP BY status`
)
