package notifications_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/notifications"
)

func ptr[T any](v T) *T { return &v }

func valid() notifications.Request {
	return notifications.Request{Type: "assignment.due", Audience: notifications.Audience{CourseID: ptr("c1")}, Title: ptr("Due tomorrow")}
}

func code(err error) string {
	var e *notifications.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return ""
}

func TestValidate(t *testing.T) {
	ids := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprint(i)
		}
		return s
	}
	future, past := time.Now().Add(time.Hour), time.Now().Add(-time.Hour)
	for _, c := range []struct {
		name string
		edit func(*notifications.Request)
		want string
	}{
		{"valid", func(*notifications.Request) {}, ""},
		{"users", func(r *notifications.Request) { r.Audience = notifications.Audience{UserIDs: ids(3)} }, ""},
		{"10000 users", func(r *notifications.Request) { r.Audience = notifications.Audience{UserIDs: ids(10_000)} }, ""},
		{"10001 users", func(r *notifications.Request) { r.Audience = notifications.Audience{UserIDs: ids(10_001)} }, notifications.CodeInvalidUserIDs},
		{"no users", func(r *notifications.Request) { r.Audience = notifications.Audience{UserIDs: []string{}} }, notifications.CodeInvalidUserIDs},
		{"repeated user", func(r *notifications.Request) { r.Audience = notifications.Audience{UserIDs: []string{"a", "b", "a"}} }, notifications.CodeInvalidUserIDs},
		{"both audiences", func(r *notifications.Request) { r.Audience.UserIDs = ids(1) }, notifications.CodeInvalidAudience},
		{"no audience", func(r *notifications.Request) { r.Audience = notifications.Audience{} }, notifications.CodeInvalidAudience},
		{"type upper", func(r *notifications.Request) { r.Type = "Assignment" }, notifications.CodeInvalidType},
		{"type empty", func(r *notifications.Request) { r.Type = "" }, notifications.CodeInvalidType},
		{"type 64", func(r *notifications.Request) { r.Type = strings.Repeat("a", 64) }, ""},
		{"type 65", func(r *notifications.Request) { r.Type = strings.Repeat("a", 65) }, notifications.CodeInvalidType},
		{"type reserved", func(r *notifications.Request) { r.Type = "material.published" }, notifications.CodeInvalidType},
		{"no title", func(r *notifications.Request) { r.Title = nil }, notifications.CodeInvalidTitle},
		{"blank title", func(r *notifications.Request) { r.Title = ptr("  ") }, notifications.CodeInvalidTitle},
		{"bidi title", func(r *notifications.Request) { r.Title = ptr("a\u202eb") }, notifications.CodeInvalidTitle},
		{"http url", func(r *notifications.Request) { r.URL = ptr("http://x.test/") }, notifications.CodeInvalidURL},
		{"data array", func(r *notifications.Request) { r.Data = []byte(`[1]`) }, notifications.CodeInvalidData},
		{"data null", func(r *notifications.Request) { r.Data = []byte(`null`) }, notifications.CodeInvalidData},
		{"data object", func(r *notifications.Request) { r.Data = []byte(`{"a": [1, 2]}`) }, ""},
		{"data 2 KB", func(r *notifications.Request) { r.Data = []byte(`{"a":"` + strings.Repeat("x", 2048-8) + `"}`) }, ""},
		{"data over 2 KB", func(r *notifications.Request) { r.Data = []byte(`{"a":"` + strings.Repeat("x", 2048-7) + `"}`) }, notifications.CodeInvalidData},
		{"priority high", func(r *notifications.Request) { r.Priority = "high" }, ""},
		{"priority urgent", func(r *notifications.Request) { r.Priority = "urgent" }, notifications.CodeInvalidPriority},
		{"collapse key", func(r *notifications.Request) { r.CollapseKey = ptr("k-1") }, ""},
		{"collapse key space", func(r *notifications.Request) { r.CollapseKey = ptr("a b") }, notifications.CodeInvalidCollapse},
		{"collapse key 65", func(r *notifications.Request) { r.CollapseKey = ptr(strings.Repeat("k", 65)) }, notifications.CodeInvalidCollapse},
		{"send_at future", func(r *notifications.Request) { r.SendAt = &future }, ""},
		{"send_at past", func(r *notifications.Request) { r.SendAt = &past }, notifications.CodeInvalidSendAt},
		{"expires before send", func(r *notifications.Request) { r.SendAt, r.ExpiresAt = &future, ptr(future.Add(-time.Minute)) }, notifications.CodeInvalidExpires},
		{"too large", func(r *notifications.Request) {
			r.Body = ptr(strings.Repeat("가", 600)) // 1,800 bytes
			r.Data = []byte(`{"a":"` + strings.Repeat("x", 2000) + `"}`)
		}, notifications.CodeTooLarge},
		{"template with title", func(r *notifications.Request) { r.Template = ptr("assignment.due") }, notifications.CodeInvalidTemplate},
		{"vars without template", func(r *notifications.Request) { r.Vars = map[string]any{"a": 1} }, notifications.CodeInvalidTemplate},
	} {
		r := valid()
		c.edit(&r)
		if got := code(r.Validate()); got != c.want {
			t.Errorf("%s: %q, want %q (%v)", c.name, got, c.want, r.Validate())
		}
	}
}

func TestDecodeIsStrict(t *testing.T) {
	r, err := notifications.Decode([]byte(`{"type":"a.b","audience":{"user_ids":["u1"]},"title":"t","data":{"x":1},"send_at":"2030-01-01T00:00:00+02:00"}`))
	if err != nil || r.Type != "a.b" || len(r.Audience.UserIDs) != 1 || string(r.Data) != `{"x":1}` || r.SendAt == nil || !r.SendAt.Equal(time.Date(2029, 12, 31, 22, 0, 0, 0, time.UTC)) {
		t.Fatalf("decode: %+v %v", r, err)
	}
	for _, b := range []string{
		`{"type":"a","titel":"t"}`,
		`{"type":"a","audience":{"course":"c"}}`,
		`{"type":"a"} {}`,
		`[]`,
		`{"type":1}`,
		`{"send_at":"tomorrow"}`,
	} {
		if _, err := notifications.Decode([]byte(b)); code(err) != notifications.CodeMalformed {
			t.Errorf("%s: %v, want malformed", b, err)
		}
	}
	// What encoding/json would take silently is refused here, so the
	// API and the CloudEvents intake refuse it alike.
	for b, want := range map[string]string{
		`{"type":"a.b","TITLE":"t"}`:             "unknown_field",
		`{"type":"a.b","title":"t","title":"u"}`: "duplicate_field",
		"{\"type\":\"a.b\",\"title\":\"\xff\"}":  "invalid_encoding",
	} {
		if _, err := notifications.Decode([]byte(b)); code(err) != want {
			t.Errorf("%q: %v, want %s", b, err, want)
		}
	}
}
