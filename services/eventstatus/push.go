package eventstatus

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/push/provider"
)

// PushCounts is the push accounting of one event, shaped to sit next to
// the fan-out's fields in the flat Report (embedded: no field names clash
// with Fanout).
//
// Target is every subscription the event should reach: the subscriptions
// the notified students hold now, plus those with an outcome recorded for
// the event that no longer exist (gone ones are deleted when recorded; a
// browser may also unsubscribe after its push was delivered). A browser
// that subscribes after its student's command was handled is counted as
// pending — it exists and was never pushed to, and the status says so
// rather than hiding it.
//
// Every count is read from event_counters (schema migrations 0006, 0010),
// which the writers of the rows keep exact in the same transactions:
// Target, Delivered, Gone, Failed, Retrying, Cancelled and Expired are
// counted, Unsent is Target minus the rest. Verify recomputes each term
// separately from the tables and names any difference.
//
// Target counts the devices of the students whose push command has run
// (it counts them when it loads them; PushDetail.AwaitingPush says how
// many students are still to come), so while a fan-out runs Target grows
// with the push stage, as Delivered does.
type PushCounts struct {
	Target    int64 `json:"target"`
	Delivered int64 `json:"delivered"`
	Gone      int64 `json:"gone"`
	Failed    int64 `json:"failed"`
	// Pending have no final outcome yet: Retrying + Unsent + Deferred,
	// as the schema's counters_pending defines it (read, not computed
	// here).
	Pending int64 `json:"pending"`
	// Retrying have a recorded retryable failure and a retry queued.
	Retrying int64 `json:"retrying"`
	// Unsent have no outcome recorded yet.
	Unsent int64 `json:"unsent"`
	// Cancelled and Expired are the outcomes of event control (cancel,
	// expires_at); their counters exist and stay 0 until it does.
	Cancelled int64 `json:"cancelled"`
	Expired   int64 `json:"expired"`
	// NotConfigured are the Failed whose platform has no provider
	// configured (recorded provider_not_configured, never sent): missing
	// credentials, not a push service's refusal.
	NotConfigured int64 `json:"not_configured"`
	// Muted and Capped were not sent because of their student's
	// preferences (push off for the event; over max_pushes_per_hour);
	// both are final. Deferred wait for the end of their student's quiet
	// hours, then become Retrying (and so on) when released.
	Muted    int64 `json:"muted"`
	Capped   int64 `json:"capped"`
	Deferred int64 `json:"deferred"`
}

// Done reports whether every target subscription has a final outcome.
// Whether every notified student is in the target yet is Push.Done's.
func (c PushCounts) Done() bool { return c.Pending == 0 }

// Platform names, as push_subscriptions.platform and
// push_deliveries.platform spell them: provider.Platform's, as strings.
const (
	PlatformWebPush = string(provider.WebPush)
	PlatformFCM     = string(provider.FCM)
	PlatformAPNs    = string(provider.APNs)
)

// Platforms is the push accounting per platform: each platform's
// PushCounts, whose sums over the platforms are the totals. Every
// platform is always present (zero when the event has no such device),
// so readers find the same shape for every event.
type Platforms struct {
	WebPush PushCounts `json:"webpush"`
	FCM     PushCounts `json:"fcm"`
	APNs    PushCounts `json:"apns"`
}

// Of returns the counts of platform, nil for an unknown one.
func (p *Platforms) Of(platform string) *PushCounts {
	switch platform {
	case PlatformWebPush:
		return &p.WebPush
	case PlatformFCM:
		return &p.FCM
	case PlatformAPNs:
		return &p.APNs
	}
	return nil
}

// All lists the platforms with their counts, in the JSON's order.
func (p *Platforms) All() []struct {
	Name   string
	Counts *PushCounts
} {
	return []struct {
		Name   string
		Counts *PushCounts
	}{{PlatformWebPush, &p.WebPush}, {PlatformFCM, &p.FCM}, {PlatformAPNs, &p.APNs}}
}

// PushDetail is what the counters say beyond the totals. It comes after
// every other field in the JSON of Push and Report, so the bytes of the
// fields readers had before it are unchanged.
type PushDetail struct {
	// AwaitingPush is the number of notified students whose push command
	// has not counted their devices yet (schema migration 0010: the push
	// worker counts a command's devices when it loads them, not the
	// fan-out when it notifies). Until it does, their devices are in no
	// count: not in Target, not pending. 0 once every command ran.
	AwaitingPush int64 `json:"awaiting_push"`
	// Platforms splits the counts by the devices' platform.
	Platforms Platforms `json:"platforms"`
	// Silenced is the number of students who turned the event's inbox off
	// (preferences): neither notified nor pushed, so in no other count.
	Silenced int64 `json:"silenced"`
}

// Push is the push accounting of one event with its identity.
type Push struct {
	EventID string `json:"event_id"`
	// Notified is the number of students notified of the event
	// (notifications rows).
	Notified int64 `json:"notified"`
	PushCounts
	PushDetail
}

// Done reports whether nothing more will be pushed: every notified
// student's devices are counted and each has a final outcome.
func (s Push) Done() bool { return s.AwaitingPush == 0 && s.PushCounts.Done() }

// LoadPush returns the push accounting of eventID (a uuid) from its
// counters: at most 48 event_counters rows and 48 per platform, whatever
// the audience size, so it is cheap enough for every poll. An unknown
// event has all counts zero.
func LoadPush(ctx context.Context, q Querier, eventID string) (Push, error) {
	s := Push{EventID: eventID}
	if err := checkEventID(eventID); err != nil {
		return s, err
	}
	rows, err := q.Query(ctx, sqlPushCounters, []string{eventID})
	if err != nil {
		return s, fmt.Errorf("push status of %s: %w", eventID, err)
	}
	out := []Push{s}
	err = scanPush(rows, out)
	return out[0], err
}

// LoadPushMany is LoadPush of every event of ids in one statement (the
// finisher's page of candidates), in the order of ids.
func LoadPushMany(ctx context.Context, q Querier, ids []string) ([]Push, error) {
	out := make([]Push, len(ids))
	for i, id := range ids {
		if err := checkEventID(id); err != nil {
			return nil, err
		}
		out[i].EventID = id
	}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, sqlPushCounters, ids)
	if err != nil {
		return nil, fmt.Errorf("push status of %d events: %w", len(ids), err)
	}
	if err := scanPush(rows, out); err != nil {
		return nil, err
	}
	return out, nil
}

// scanPush reads sqlPushCounters' rows into out, each by its event's
// position: the totals (platform ""), and one row per platform with
// counters.
func scanPush(rows pgx.Rows, out []Push) error {
	defer rows.Close()
	totals := make([]bool, len(out))
	for rows.Next() {
		var i int32
		var platform string
		var targetedStudents int64
		var c PushCounts
		var notified, silenced int64
		if err := rows.Scan(&i, &platform, &notified, &targetedStudents, &c.Target, &c.Delivered, &c.Gone, &c.Failed, &c.Retrying, &c.Cancelled, &c.Expired, &c.NotConfigured,
			&c.Muted, &c.Capped, &c.Deferred, &silenced, &c.Pending); err != nil {
			return fmt.Errorf("push status: %w", err)
		}
		if i < 1 || int(i) > len(out) {
			return fmt.Errorf("push status: counters of event %d of %d", i, len(out))
		}
		s := &out[i-1]
		c.derive()
		if platform == "" {
			totals[i-1] = true
			s.Notified, s.PushCounts, s.Silenced = notified, c, silenced
			// Negative only if the counters drifted from the rows, which
			// Verify names; shown as it is rather than hidden.
			s.AwaitingPush = notified - targetedStudents
			continue
		}
		p := s.Platforms.Of(platform)
		if p == nil {
			return fmt.Errorf("push status of %s: counters of unknown platform %q", s.EventID, platform)
		}
		*p = c
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("push status: %w", err)
	}
	for i, ok := range totals {
		if !ok {
			return fmt.Errorf("push status of %s: no totals row", out[i].EventID)
		}
	}
	return nil
}

// derive fills Unsent from Pending, which the schema computes
// (counters_pending, migration 0028): the pending that are neither
// retrying nor deferred. Negative only if the counters drifted from the
// rows, which Verify names.
func (c *PushCounts) derive() {
	c.Unsent = c.Pending - c.Retrying - c.Deferred
}
