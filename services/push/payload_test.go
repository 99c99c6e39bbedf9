package push

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/receipts"
	"github.com/notify-dev/notify/streams"
)

// urlOfSize returns an https URL of exactly n bytes full of & and <, which
// HTML escaping would turn into six bytes each.
func urlOfSize(n int) string {
	u := "https://x.example/m?"
	for len(u) < n {
		u += "a=<&"
	}
	return u[:n]
}

// fillTo returns the URL length that makes the payload of title exactly
// webpush.MaxPayload bytes long.
func fillTo(t *testing.T, title string) int {
	t.Helper()
	base := len(encodeJSON(pushPayload{Title: title, URL: "x", EventID: evA, CourseID: evA})) - 1
	return webpush.MaxPayload - base
}

func decodePayload(t *testing.T, b []byte) pushPayload {
	t.Helper()
	if len(b) > webpush.MaxPayload {
		t.Fatalf("payload is %d bytes, at most %d fit", len(b), webpush.MaxPayload)
	}
	var p pushPayload
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("payload %q: %v", b, err)
	}
	if p.EventID != evA || p.CourseID != evA {
		t.Fatalf("ids lost: %+v", p)
	}
	return p
}

// A legal URL with & and < that fits unescaped is sent whole, title and all:
// HTML escaping made it overflow and the message went out as "New course
// material" without title or URL.
func TestPayloadAtTheLimitKeepsTitleAndURL(t *testing.T) {
	t.Parallel()
	title := "Week 1 & <intro>"
	cmd := streams.PushCommand{EventID: evA, CourseID: evA, Title: title, URL: urlOfSize(fillTo(t, title))}
	b := buildPayload(cmd)
	p := decodePayload(t, b)
	if len(b) != webpush.MaxPayload || p.Title != title || p.URL != cmd.URL {
		t.Fatalf("%d bytes, title %q, url kept %v", len(b), p.Title, p.URL == cmd.URL)
	}
}

// One byte over: the URL is the longer field, so it alone gives way.
func TestPayloadOverByOneDropsTheLongerURL(t *testing.T) {
	t.Parallel()
	title := "Week 1 & <intro>"
	cmd := streams.PushCommand{EventID: evA, CourseID: evA, Title: title, URL: urlOfSize(fillTo(t, title) + 1)}
	p := decodePayload(t, buildPayload(cmd))
	if p.Title != title || p.URL != "" {
		t.Fatalf("title %q, url %d bytes; want the title whole and the url dropped", p.Title, len(p.URL))
	}
}

// One byte over with the title the longer field: the title is shortened (by
// as little as it takes) and the URL kept.
func TestPayloadOverByOneShortensTheLongerTitle(t *testing.T) {
	t.Parallel()
	title := strings.Repeat("Algèbre & <analyse> ", 120) // ~2,500 bytes
	url := urlOfSize(fillTo(t, title) + 1)
	if len(url) >= len(title) {
		t.Fatalf("test setup: url %d bytes not shorter than title %d", len(url), len(title))
	}
	b := buildPayload(streams.PushCommand{EventID: evA, CourseID: evA, Title: title, URL: url})
	p := decodePayload(t, b)
	short := strings.TrimSuffix(p.Title, ellipsis)
	if p.URL != url || short == p.Title || !strings.HasPrefix(title, short) {
		t.Fatalf("title %d bytes (%q…), url kept %v", len(p.Title), p.Title[:min(40, len(p.Title))], p.URL == url)
	}
	if len(b) < webpush.MaxPayload-8 {
		t.Fatalf("payload %d bytes: the title was cut more than needed", len(b))
	}
}

// Which field is longer is judged on its encoded size: a title of quotes
// (two bytes each encoded) is longer than a URL with more raw bytes.
func TestPayloadJudgesFieldsByEncodedSize(t *testing.T) {
	t.Parallel()
	title := strings.Repeat(`"`, 1200) // 1,200 raw bytes, 2,400 encoded
	url := urlOfSize(1600)
	b := buildPayload(streams.PushCommand{EventID: evA, CourseID: evA, Title: title, URL: url})
	p := decodePayload(t, b)
	if p.URL != url || !strings.HasSuffix(p.Title, ellipsis) {
		t.Fatalf("url kept %v, title %d bytes; want the title shortened and the url kept", p.URL == url, len(p.Title))
	}
}

// TestEventTopicCollapsesResends: every push of an event carries the same
// RFC 8030 Topic, derived from the event id and valid for every push
// service (≤ 32 base64url characters); other events get other topics.
func TestEventTopicCollapsesResends(t *testing.T) {
	a, b := eventTopic(evA), eventTopic("3f0c9a6e-1b2d-4c5e-8f70-0123456789ab")
	if a == "" || a == b || eventTopic(evA) != a {
		t.Fatalf("topics %q and %q: want stable, non-empty and distinct per event", a, b)
	}
	if len(a) != 22 {
		t.Fatalf("topic %q is %d characters, want 22 (16 bytes in base64url)", a, len(a))
	}
	if err := webpush.ValidateTopic(a); err != nil {
		t.Fatal(err)
	}
	if eventTopic("not-a-uuid") != "" {
		t.Fatal("a non-uuid id got a topic")
	}
}

// With receipts on, a payload at the limit still fits once a device's
// token replaces the placeholder (the token's room is taken from the
// optional fields, as for any required one), and each device's copy has
// its own student's token while the shared payload keeps the placeholder.
func TestPayloadReceiptTokenFitsAndIsPerDevice(t *testing.T) {
	t.Parallel()
	key, err := receipts.NewKey([]byte("receipt-secret-receipt-secret-32"), 0)
	if err != nil {
		t.Fatal(err)
	}
	title := "Week 1 & <intro>"
	cmd := streams.PushCommand{EventID: evA, CourseID: evA, Title: title, URL: urlOfSize(fillTo(t, title))}
	texts := newCommandTexts(cmd, key, time.Now())
	alice, bob := recipient{user: evA, platform: "webpush"}, recipient{user: "b0000000-0000-4000-8000-00000000000b", platform: "webpush"}
	da, db := texts.deliveryOf(alice), texts.deliveryOf(bob)
	shared := texts.of(alice).Payload
	for who, d := range map[string][]byte{"alice": da.Payload, "bob": db.Payload} {
		p := decodePayload(t, d)
		c, err := key.Verify(p.Receipt, uuid.MustParse(evA), time.Now())
		if err != nil || len(d) != len(shared) {
			t.Fatalf("%s: receipt %q: %v (%d bytes, shared %d)", who, p.Receipt, err, len(d), len(shared))
		}
		if want := map[string]string{"alice": alice.user, "bob": bob.user}[who]; c.UserID.String() != want {
			t.Errorf("%s: token names %s", who, c.UserID)
		}
		if p.URL != "" || p.Title != title {
			t.Errorf("%s: the token's room must come from the longer optional field, the URL: url %d bytes, title %q", who, len(p.URL), p.Title)
		}
	}
	if !strings.Contains(string(shared), receiptPlaceholder) {
		t.Error("the shared payload was written to")
	}
	// Without a key: no receipt member at all.
	if p := decodePayload(t, newCommandTexts(cmd, nil, time.Now()).deliveryOf(alice).Payload); p.Receipt != "" {
		t.Errorf("receipt %q without a key", p.Receipt)
	}
}
