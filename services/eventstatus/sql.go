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
//
// A notification to a list of users has no course (course "", no
// instructor): only a service may read it.
const sqlOwner = `
SELECT coalesce(e.course_id::text, ''), c.instructor_id::text
FROM (
  SELECT course_id FROM fanout_runs WHERE event_id = $1
  UNION ALL
  SELECT course_id FROM materials WHERE event_id = $1
  UNION ALL
  SELECT course_id FROM notification_events WHERE event_id = $1
  LIMIT 1
) e LEFT JOIN courses c ON c.id = e.course_id`

// The fan-out's progress: its run, else (not planned yet) its material,
// and the run's ranges.
const (
	sqlFanoutRun = `
SELECT coalesce(course_id::text, ''), coalesce(material_id::text, ''), title, published_at, ranges, slice_size,
       started_at, finished_at, notified, now(), state, send_at, expires_at, type
FROM fanout_runs WHERE event_id = $1`

	// An event not planned yet: its material, or its notification (whose
	// title travels in its record only).
	sqlFanoutMaterial = `
SELECT course_id::text, id::text, title, published_at, 'material.published' FROM materials WHERE event_id = $1
UNION ALL
SELECT coalesce(course_id::text, ''), '', '', created_at, type FROM notification_events WHERE event_id = $1
LIMIT 1`

	sqlFanoutRanges = `
SELECT lo::text, hi::text, cursor::text, slices_done, notified, done_at IS NOT NULL
FROM fanout_ranges WHERE event_id = $1`
)

// sqlPushCounters sums the counter shards of each event of $1 (uuid[]):
// its totals (≤ 48 event_counters rows by primary key prefix, platform
// empty, all zero for an unknown event) and then each platform's (≤ 48
// event_platform_counters rows each), in one statement, every row led by
// its event's position in $1 (1-based). One statement for many events: the
// finisher polls every event whose fan-out finished, a page of hundreds of
// small events per pass, and a statement per event cost them more than
// their few counter rows (pg_stat_statements, RESULTS.md "The lane
// set-wise"). Each event's rows by its primary-key prefix (LATERAL): a
// join of the array to the counters was planned as a hash join over
// every event's counter rows, 68 ms for a page of 500. Pending, last, is
// the schema's counters_pending (migration 0028): its one definition.
const sqlPushCounters = `
SELECT e.i::int, ''::text, t.*
FROM unnest($1::uuid[]) WITH ORDINALITY AS e(id, i)
CROSS JOIN LATERAL (
  SELECT coalesce(sum(c.notified), 0)::bigint, coalesce(sum(c.targeted_students), 0)::bigint,
    coalesce(sum(c.targeted), 0)::bigint, coalesce(sum(c.delivered), 0)::bigint, coalesce(sum(c.gone), 0)::bigint,
    coalesce(sum(c.failed), 0)::bigint, coalesce(sum(c.retrying), 0)::bigint,
    coalesce(sum(c.cancelled), 0)::bigint, coalesce(sum(c.expired), 0)::bigint,
    coalesce(sum(c.not_configured), 0)::bigint,
    coalesce(sum(c.muted), 0)::bigint, coalesce(sum(c.capped), 0)::bigint, coalesce(sum(c.deferred), 0)::bigint,
    coalesce(sum(c.silenced), 0)::bigint,
    coalesce(sum(counters_pending(c.targeted, c.delivered, c.gone, c.failed, c.cancelled, c.expired, c.muted, c.capped)), 0)::bigint
  FROM event_counters c WHERE c.event_id = e.id) t
UNION ALL
SELECT e.i::int, p.*
FROM unnest($1::uuid[]) WITH ORDINALITY AS e(id, i)
CROSS JOIN LATERAL (
  SELECT c.platform, 0::bigint, 0::bigint,
    sum(c.targeted)::bigint, sum(c.delivered)::bigint, sum(c.gone)::bigint,
    sum(c.failed)::bigint, sum(c.retrying)::bigint,
    sum(c.cancelled)::bigint, sum(c.expired)::bigint,
    sum(c.not_configured)::bigint,
    sum(c.muted)::bigint, sum(c.capped)::bigint, sum(c.deferred)::bigint, 0::bigint,
    sum(counters_pending(c.targeted, c.delivered, c.gone, c.failed, c.cancelled, c.expired, c.muted, c.capped))::bigint
  FROM event_platform_counters c WHERE c.event_id = e.id
  GROUP BY c.platform) p`

// Verify's terms, recomputed from the rows, each on its own so that a
// mistake in one cannot hide in another. The device terms are grouped by
// platform (the subscription's for current devices, the outcome's for
// outcomes); their totals are the sums. "Counted" students are those
// inside an event_target_ranges row of the event (their push command
// counted them), joined range by range: a range scan of notifications'
// primary key each.
const (
	sqlVerifyNotified = `SELECT count(*) FROM notifications WHERE event_id = $1`

	sqlVerifyTargetedStudents = `
SELECT count(*) FROM event_target_ranges r
JOIN notifications n ON n.event_id = r.event_id AND n.user_id BETWEEN r.first_user AND r.last_user
WHERE r.event_id = $1`

	// Ranges of one event never overlap (a command overlapping a counted
	// range counts nothing): an overlap would count students twice.
	sqlVerifyOverlappingRanges = `
SELECT count(*) FROM event_target_ranges a
JOIN event_target_ranges b ON b.event_id = a.event_id AND b.first_user > a.first_user AND b.first_user <= a.last_user
WHERE a.event_id = $1`

	sqlVerifyCurrent = `
SELECT s.platform, count(*) FROM event_target_ranges r
JOIN notifications n ON n.event_id = r.event_id AND n.user_id BETWEEN r.first_user AND r.last_user
JOIN push_subscriptions s ON s.user_id = n.user_id
WHERE r.event_id = $1
GROUP BY s.platform`

	sqlVerifyOrphaned = `
SELECT d.platform, count(*) FROM push_deliveries d WHERE d.event_id = $1
  AND NOT EXISTS (SELECT 1 FROM push_subscriptions s WHERE s.id = d.subscription_id)
GROUP BY d.platform`

	sqlVerifyUnsent = `
SELECT s.platform, count(*) FROM event_target_ranges r
JOIN notifications n ON n.event_id = r.event_id AND n.user_id BETWEEN r.first_user AND r.last_user
JOIN push_subscriptions s ON s.user_id = n.user_id
WHERE r.event_id = $1 AND NOT EXISTS (SELECT 1 FROM push_deliveries d WHERE d.event_id = $1 AND d.subscription_id = s.id)
GROUP BY s.platform`

	sqlVerifyStrangers = `
SELECT count(*) FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
WHERE d.event_id = $1 AND NOT EXISTS (SELECT 1 FROM notifications n WHERE n.event_id = $1 AND n.user_id = s.user_id)`

	// Outcomes of devices that still exist: none may be gone (gone ones
	// are deleted when recorded), and each has its device's platform. One
	// pass over the event's outcomes for both.
	sqlVerifyAlive = `
SELECT count(*) FILTER (WHERE d.status = 'gone'), count(*) FILTER (WHERE d.platform <> s.platform)
FROM push_deliveries d JOIN push_subscriptions s ON s.id = d.subscription_id
WHERE d.event_id = $1`

	sqlVerifyOdd = `
SELECT count(*) FROM push_deliveries WHERE event_id = $1
  AND (status NOT IN ('delivered', 'gone', 'failed', 'retrying', 'cancelled', 'expired', 'muted', 'capped', 'deferred') OR attempts < 0)`

	// Students silenced by their preferences (inbox off): the fan-out's
	// holds, against the counter.
	sqlVerifySilenced = `SELECT coalesce(sum(students), 0) FROM push_hold_sets WHERE event_id = $1 AND reason = 'silenced'`

	// A deferred push is released once: a released hold has no device
	// left deferred, an unreleased one none sent.
	sqlVerifyHeld = `
SELECT count(*) FROM push_hold_sets h CROSS JOIN LATERAL unnest(h.user_ids) AS u(user_id)
JOIN push_subscriptions s ON s.user_id = u.user_id
JOIN push_deliveries d ON d.event_id = h.event_id AND d.subscription_id = s.id
WHERE h.event_id = $1 AND h.reason = 'deferred'
  AND ((h.released_at IS NULL) <> (d.status = 'deferred'))`

	// The counters' own test of a not-configured outcome (migration 0028):
	// a definition, not a sum that could drift.
	sqlVerifyNotConfigured = `
SELECT platform, count(*) FROM push_deliveries
WHERE event_id = $1 AND push_delivery_not_configured(status, error)
GROUP BY platform`

	sqlVerifyByStatus = `
SELECT platform, status, count(*) FROM push_deliveries WHERE event_id = $1 GROUP BY platform, status`
)
