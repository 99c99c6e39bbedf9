package fcm

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The hand-written body decodes, with encoding/json, to exactly the
// message: quotes, control characters, invalid UTF-8 and line separators
// included.
func TestAppendMessage(t *testing.T) {
	for _, m := range []Message{
		{Token: "tok", Title: "New lesson", Body: "Chapter 3", EventID: "e1", CourseID: "42", URL: "https://x.example/c/42?a=1&b=<2>"},
		{Token: "tok", Title: "only a title"},
		{Token: "t\"\\", Title: "tab\there\nnew \x01 \u2028 \u2029 é 日本", Body: "bad \xff utf-8", URL: "u"},
	} {
		b := appendMessage(nil, &m, 3600)
		var got struct {
			Message struct {
				Token        string            `json:"token"`
				Notification map[string]string `json:"notification"`
				Data         map[string]string `json:"data"`
				Android      map[string]string `json:"android"`
			} `json:"message"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want, _ := json.Marshal(m.Title)
		var title string
		json.Unmarshal(want, &title) // encoding/json's view of the title, invalid UTF-8 replaced
		if got.Message.Token != m.Token || got.Message.Notification["title"] != title {
			t.Errorf("%s: token/title %q %q", b, got.Message.Token, got.Message.Notification["title"])
		}
		data := map[string]string{}
		for k, v := range map[string]string{"event_id": m.EventID, "course_id": m.CourseID, "url": m.URL} {
			if v != "" {
				data[k] = v
			}
		}
		if len(data) == 0 {
			data = nil
		}
		if !reflect.DeepEqual(got.Message.Data, data) {
			t.Errorf("%s: data %v, want %v", b, got.Message.Data, data)
		}
		android := map[string]string{"ttl": "3600s"}
		if m.EventID != "" {
			android["collapse_key"] = m.EventID
		}
		if !reflect.DeepEqual(got.Message.Android, android) {
			t.Errorf("%s: android %v, want %v", b, got.Message.Android, android)
		}
	}
}
