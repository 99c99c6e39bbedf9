package lifecycle

// sqlCandidates pages through running events whose fan-out finished, by
// event id (the partial index fanout_runs_finishing of migration 0012).
const sqlCandidates = `
SELECT event_id::text FROM fanout_runs
WHERE state = 'running' AND finished_at IS NOT NULL AND event_id > $1::uuid
ORDER BY event_id LIMIT $2`

// sqlFinish is the running → finished transition of the events $1, by the
// state rules: UPDATE … WHERE state = <expected>, setting
// state_changed_at. The row trigger of migration 0012 writes PushFinished
// of each in the same transaction. It returns the events it moved.
const sqlFinish = `
UPDATE fanout_runs SET state = 'finished', state_changed_at = now()
WHERE event_id = ANY($1::uuid[]) AND state = 'running' AND finished_at IS NOT NULL
RETURNING event_id::text`

// sqlList is one page of events, newest published first: $1 course (NULL:
// all), $2 state (NULL: all), $6 type (NULL: all; fanout_runs_type_recent), ($3, $4) the cursor (NULL: first page), $5
// the page size + 1 (the extra row says whether a next page exists).
// published_at is truncated to microseconds in the cursor, as Postgres
// stores it, so the row comparison resumes exactly after the last row.
const sqlList = `
SELECT event_id::text, type, coalesce(course_id::text, ''), title, published_at, state, state_changed_at, send_at, finished_at IS NOT NULL
FROM fanout_runs
WHERE ($1::uuid IS NULL OR course_id = $1::uuid)
  AND ($2::text IS NULL OR state = $2::text)
  AND ($6::text IS NULL OR type = $6::text)
  AND ($3::timestamptz IS NULL OR (published_at, event_id) < ($3::timestamptz, $4::uuid))
ORDER BY published_at DESC, event_id DESC
LIMIT $5`
