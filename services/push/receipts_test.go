package push_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/services/ids"
	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/receipts"
)

// TestEveryPushCarriesItsStudentsReceiptToken: with a receipt key, each
// device's push — the Web Push payload, FCM's data, APNs's body — carries
// a receipt token that verifies for the event and names that device's
// student and platform, and no two students share one.
func TestEveryPushCarriesItsStudentsReceiptToken(t *testing.T) {
	t.Parallel()
	key, err := receipts.NewKey([]byte("receipt-secret-receipt-secret-32"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []pushmock.Observed
	pf := newObservedPlatformFixture(t, 60, 0, func(o pushmock.Observed) {
		mu.Lock()
		seen = append(seen, o)
		mu.Unlock()
	})
	// Each device's student, read before the gone ones are deleted.
	owner := map[string]string{} // "platform/device" → user
	rows, err := pf.db.Pool.Query(pf.ctx, `SELECT s.platform, CASE WHEN s.platform = 'webpush' THEN regexp_replace(s.endpoint, '^.*/', '') ELSE s.token END, s.user_id::text
		FROM push_subscriptions s`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var platform, device, user string
		if err := rows.Scan(&platform, &device, &user); err != nil {
			t.Fatal(err)
		}
		owner[platform+"/"+device] = user
	}
	rows.Close()
	var c notifications.Created
	err = pgx.BeginFunc(pf.ctx, pf.db.Pool, func(tx pgx.Tx) error {
		var err error
		c, err = notifications.Create(pf.ctx, tx, ids.Mapper{}, notifications.Sender{Service: "lms"}, notifications.Request{
			Type: "assignment.due", Title: ptr("Essay due"), Audience: notifications.Audience{CourseID: &pf.course},
		}, uuid.New())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pf.eventID = c.EventID.String()
	runPipelineWith(t, pf, func(cfg *push.Config) { cfg.Receipts = key })
	st := pf.waitSettled(2 * time.Minute)
	pf.verify()

	mu.Lock()
	defer mu.Unlock()
	checked := map[string]int{}
	byUser := map[string]string{} // token → user
	for _, o := range seen {
		var b struct {
			EventID string `json:"event_id"`
			Receipt string `json:"receipt"`
			Message struct {
				Data map[string]string `json:"data"`
			} `json:"message"`
		}
		if err := json.Unmarshal(o.Body, &b); err != nil {
			t.Fatalf("%s body %q: %v", o.Platform, o.Body, err)
		}
		ev, tok := b.EventID, b.Receipt
		if o.Platform == "fcm" {
			ev, tok = b.Message.Data["event_id"], b.Message.Data["receipt"]
		}
		if ev != pf.eventID {
			continue
		}
		device := strings.ToLower(o.Device)
		if o.Platform == "fcm" {
			device = o.Device
		}
		claims, err := key.Verify(tok, c.EventID, time.Now())
		if err != nil {
			t.Fatalf("%s device %s: receipt %q: %v (body %s)", o.Platform, device, tok, err, o.Body)
		}
		if want := owner[o.Platform+"/"+device]; claims.UserID.String() != want || claims.Platform != o.Platform {
			t.Fatalf("%s device %s: token names %s on %s, want %s on %s", o.Platform, device, claims.UserID, claims.Platform, want, o.Platform)
		}
		if u, ok := byUser[tok]; ok && u != claims.UserID.String() {
			t.Fatalf("two students share token %s", tok)
		}
		byUser[tok] = claims.UserID.String()
		checked[o.Platform]++
	}
	if checked["webpush"] == 0 || checked["fcm"] == 0 || checked["apns"] == 0 || int64(checked["webpush"]+checked["fcm"]+checked["apns"]) < st.Target {
		t.Fatalf("checked %v of %d devices", checked, st.Target)
	}
}
