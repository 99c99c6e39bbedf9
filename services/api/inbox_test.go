package api

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// insertNotifications writes n fan-out runs and a notification of each for
// user, directly (the fan-out is another package's job). Every third
// notification shares its created_at with the previous one, so the event id
// tiebreak of the keyset is exercised.
func (e *testEnv) insertNotifications(user UUID, n int, base time.Time) map[string]bool {
	e.t.Helper()
	ids := map[string]bool{}
	ctx := context.Background()
	at := base
	for i := range n {
		ev := NewUUID()
		if i%3 != 2 {
			at = at.Add(time.Second)
		}
		_, err := e.db.Pool.Exec(ctx, `INSERT INTO fanout_runs (event_id, course_id, material_id, title, url, published_at, ranges, slice_size)
			VALUES ($1, $2, $3, $4, 'https://example.edu/m', $5, 1, 5000) ON CONFLICT DO NOTHING`, ev, e.course, NewUUID(), "material", at)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.db.Pool.Exec(ctx, `INSERT INTO notifications (event_id, user_id, created_at) VALUES ($1, $2, $3)`, ev, user, at); err != nil {
			e.t.Fatal(err)
		}
		ids[ev.String()] = true
	}
	return ids
}

func TestInboxPagination(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 123456000, time.UTC)
	want := e.insertNotifications(e.student, 45, base)
	other := NewUUID()
	e.insertNotifications(other, 5, base) // someone else's: never shown
	tok := e.token(e.student)

	seen := map[string]bool{}
	var prev *InboxItem
	cursor := ""
	pages := 0
	for {
		path := "/v1/me/notifications?limit=10"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := e.do(req{method: "GET", path: path, token: tok})
		if r.status != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages, r.status, r.body)
		}
		var p InboxPage
		r.decode(t, &p)
		pages++
		for i := range p.Items {
			it := p.Items[i]
			if seen[it.EventID] {
				t.Fatalf("duplicate %s on page %d", it.EventID, pages)
			}
			if !want[it.EventID] {
				t.Fatalf("foreign notification %s", it.EventID)
			}
			seen[it.EventID] = true
			if prev != nil && (it.CreatedAt.After(prev.CreatedAt) || (it.CreatedAt.Equal(prev.CreatedAt) && it.EventID >= prev.EventID)) {
				t.Fatalf("order: %s %s after %s %s", it.CreatedAt, it.EventID, prev.CreatedAt, prev.EventID)
			}
			if it.CourseID != e.course.String() || it.Title != "material" || it.URL != "https://example.edu/m" || it.ReadAt != nil {
				t.Fatalf("item %+v", it)
			}
			prev = &it
		}
		if p.NextCursor == "" {
			if len(p.Items) != 5 {
				t.Fatalf("last page has %d items, want 5", len(p.Items))
			}
			break
		}
		if len(p.Items) != 10 {
			t.Fatalf("page %d has %d items, want 10", pages, len(p.Items))
		}
		cursor = p.NextCursor
	}
	if len(seen) != 45 || pages != 5 {
		t.Fatalf("saw %d notifications in %d pages, want 45 in 5", len(seen), pages)
	}

	// Default limit 20; an exact multiple ends without an empty page.
	r := e.do(req{method: "GET", path: "/v1/me/notifications", token: tok})
	var p InboxPage
	r.decode(t, &p)
	if len(p.Items) != 20 || p.NextCursor == "" {
		t.Fatalf("default page: %d items, cursor %q", len(p.Items), p.NextCursor)
	}
	r = e.do(req{method: "GET", path: "/v1/me/notifications?limit=45", token: tok})
	p = InboxPage{}
	r.decode(t, &p)
	if len(p.Items) != 45 || p.NextCursor != "" {
		t.Fatalf("limit=45: %d items, cursor %q", len(p.Items), p.NextCursor)
	}
	// An empty inbox is an empty list, not null.
	r = e.do(req{method: "GET", path: "/v1/me/notifications", token: e.token(e.instructor)})
	if string(r.body) != "{\"items\":[]}\n" {
		t.Fatalf("empty inbox: %s", r.body)
	}
}

func TestMarkRead(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ids := e.insertNotifications(e.student, 2, time.Now().Add(-time.Hour))
	var ev string
	for id := range ids {
		ev = id
		break
	}
	path := "/v1/me/notifications/" + ev + "/read"
	if r := e.do(req{method: "POST", path: path, token: e.token(e.instructor)}); r.status != http.StatusNotFound {
		t.Fatalf("someone else's: %d %s", r.status, r.body)
	}
	if r := e.do(req{method: "POST", path: path, token: e.token(e.student)}); r.status != http.StatusNoContent {
		t.Fatalf("read: %d %s", r.status, r.body)
	}
	var first time.Time
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT read_at FROM notifications WHERE event_id = $1`, mustUUID(t, ev)).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if r := e.do(req{method: "POST", path: path, token: e.token(e.student)}); r.status != http.StatusNoContent {
		t.Fatalf("read again: %d %s", r.status, r.body)
	}
	var second time.Time
	if err := e.db.Pool.QueryRow(context.Background(), `SELECT read_at FROM notifications WHERE event_id = $1`, mustUUID(t, ev)).Scan(&second); err != nil {
		t.Fatal(err)
	}
	if !first.Equal(second) {
		t.Fatalf("read_at moved from %s to %s", first, second)
	}
	r := e.do(req{method: "GET", path: "/v1/me/notifications", token: e.token(e.student)})
	var p InboxPage
	r.decode(t, &p)
	read := 0
	for _, it := range p.Items {
		if it.ReadAt != nil {
			read++
			if it.EventID != ev || !it.ReadAt.Equal(first) {
				t.Fatalf("read item %+v", it)
			}
		}
	}
	if read != 1 {
		t.Fatalf("%d read items, want 1", read)
	}
}

func TestInboxCursorRoundTrip(t *testing.T) {
	t.Parallel()
	c := inboxCursor{createdAt: time.Date(2026, 3, 4, 5, 6, 7, 891011000, time.UTC), eventID: NewUUID()}
	got, ok := decodeInboxCursor(c.encode())
	if !ok || !got.createdAt.Equal(c.createdAt) || got.eventID != c.eventID {
		t.Fatalf("round trip %+v → %+v %v", c, got, ok)
	}
	for _, bad := range []string{"", "x", c.encode() + "A", c.encode()[1:]} {
		if _, ok := decodeInboxCursor(bad); ok {
			t.Errorf("cursor %q accepted", bad)
		}
	}
}

func mustUUID(t *testing.T, s string) UUID {
	t.Helper()
	u, err := ParseUUID(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
