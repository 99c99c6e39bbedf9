package lifecycle

// sqlCandidates pages through running events whose fan-out finished, by
// event id (the partial index fanout_runs_finishing of migration 0013).
const sqlCandidates = `
SELECT event_id::text FROM fanout_runs
WHERE state = 'running' AND finished_at IS NOT NULL AND event_id > $1::uuid
ORDER BY event_id LIMIT $2`

// sqlFinish is the running → finished transition, by the state rules:
// UPDATE … WHERE state = <expected>, setting state_changed_at. The row
// trigger of migration 0013 writes PushFinished in the same transaction.
const sqlFinish = `
UPDATE fanout_runs SET state = 'finished', state_changed_at = now()
WHERE event_id = $1 AND state = 'running' AND finished_at IS NOT NULL`
