package eventstatus

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// AppOutcomes are one app's recorded outcomes of an event on one
// platform, by push_deliveries.status (delivered, gone, failed, retrying,
// expired, cancelled, muted, capped, deferred).
//
// They are read on request, not kept as counters: push_deliveries does
// not name the app (a worker's recording stays narrow: the app is the
// device's), so they join each outcome to its device. A gone device is
// deleted when its outcome is recorded, and a device may be removed
// after its push: those outcomes have no app any more and are counted
// under App "" (RemovedDevices). Devices not yet sent have no outcome
// and are not here; the event's totals (PushCounts, Platforms) count
// them.
type AppOutcomes struct {
	App      string           `json:"app"`
	Platform string           `json:"platform"`
	Counts   map[string]int64 `json:"counts"`
}

// RemovedDevices is the App of outcomes whose device no longer exists.
const RemovedDevices = ""

// sqlAppOutcomes: one pass over the event's outcomes (its primary-key
// prefix) with each device by primary key.
const sqlAppOutcomes = `
SELECT coalesce(s.app, ''), d.platform, d.status, count(*)
FROM push_deliveries d LEFT JOIN push_subscriptions s ON s.id = d.subscription_id
WHERE d.event_id = $1
GROUP BY 1, 2, 3`

// LoadApps reads eventID's recorded outcomes per app and platform,
// ordered by app (removed devices last) and platform. It reads every
// outcome of the event: for a 1M event, about a second; `notify status`
// does it only when asked (--apps).
func LoadApps(ctx context.Context, q Querier, eventID string) ([]AppOutcomes, error) {
	if err := checkEventID(eventID); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, sqlAppOutcomes, eventID)
	if err != nil {
		return nil, fmt.Errorf("outcomes per app of %s: %w", eventID, err)
	}
	defer rows.Close()
	by := map[[2]string]*AppOutcomes{}
	var out []*AppOutcomes
	for rows.Next() {
		var app, platform, status string
		var n int64
		if err := rows.Scan(&app, &platform, &status, &n); err != nil {
			return nil, fmt.Errorf("outcomes per app of %s: %w", eventID, err)
		}
		k := [2]string{app, platform}
		a := by[k]
		if a == nil {
			a = &AppOutcomes{App: app, Platform: platform, Counts: map[string]int64{}}
			by[k] = a
			out = append(out, a)
		}
		a.Counts[status] += n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outcomes per app of %s: %w", eventID, err)
	}
	slices.SortFunc(out, func(a, b *AppOutcomes) int {
		if (a.App == RemovedDevices) != (b.App == RemovedDevices) {
			if a.App == RemovedDevices {
				return 1
			}
			return -1
		}
		return strings.Compare(a.App+"\x00"+a.Platform, b.App+"\x00"+b.Platform)
	})
	res := make([]AppOutcomes, len(out))
	for i, a := range out {
		res[i] = *a
	}
	return res, nil
}

// appColumns are WriteApps' status columns, in the report's order.
var appColumns = []string{"delivered", "gone", "failed", "retrying", "expired", "cancelled", "muted", "capped", "deferred"}

// WriteApps prints outcomes as a table, one line per app and platform.
func WriteApps(w io.Writer, apps []AppOutcomes) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "app\tplatform\t%s\t\n", strings.Join(appColumns, "\t"))
	for _, a := range apps {
		name := a.App
		if name == RemovedDevices {
			name = "(device removed)"
		}
		fmt.Fprintf(tw, "%s\t%s", name, a.Platform)
		for _, c := range appColumns {
			fmt.Fprintf(tw, "\t%d", a.Counts[c])
		}
		fmt.Fprint(tw, "\t\n")
	}
	return tw.Flush()
}
