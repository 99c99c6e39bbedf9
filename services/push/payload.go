package push

import (
	"encoding/json"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/streams"
	"unicode/utf8"
)

// pushPayload is what the browser's service worker receives.
type pushPayload struct {
	Title    string `json:"title"`
	URL      string `json:"url,omitempty"`
	EventID  string `json:"event_id"`
	CourseID string `json:"course_id"`
}

// defaultTitle is shown when the command carries no title.
const defaultTitle = "New course material"

// buildPayload encodes the message once per command, shortening the title
// (and dropping the URL if it alone is too long) so it fits one Web Push
// record.
func buildPayload(cmd streams.PushCommand) []byte {
	p := pushPayload{Title: cmd.Title, URL: cmd.URL, EventID: cmd.EventID, CourseID: cmd.CourseID}
	if p.Title == "" {
		p.Title = defaultTitle
	}
	for {
		b, err := json.Marshal(p)
		if err == nil && len(b) <= webpush.MaxPayload {
			return b
		}
		switch {
		case len(p.URL) > webpush.MaxPayload/2:
			p.URL = ""
		case len(p.Title) > 16:
			cut := len(p.Title) * 3 / 4
			for cut > 0 && !utf8.RuneStart(p.Title[cut]) {
				cut--
			}
			p.Title = p.Title[:cut] + "…"
		default:
			p.URL, p.Title = "", defaultTitle
		}
	}
}
