package apns

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/notify-dev/notify/services/push/pushjson"
)

// appendBody appends n's JSON body:
//
//	{"aps":{"alert":{"title":…,"body":…}},"event_id":…,<Data, by key>}
//
// encoded by hand rather than through encoding/json: it is the one
// allocation-heavy step left per send, and its shape is fixed.
func appendBody(b []byte, n Notification) ([]byte, error) {
	b = append(b, `{"aps":{"alert":{"title":`...)
	b = pushjson.AppendString(b, n.Title)
	if n.Body != "" {
		b = append(b, `,"body":`...)
		b = pushjson.AppendString(b, n.Body)
	}
	b = append(b, `}}`...)
	if n.EventID != "" {
		b = append(b, `,"event_id":`...)
		b = pushjson.AppendString(b, n.EventID)
	}
	if n.Receipt != "" {
		b = append(b, `,"receipt":`...)
		b = pushjson.AppendString(b, n.Receipt)
	}
	if len(n.Data) > 0 {
		keys := make([]string, 0, len(n.Data))
		for k := range n.Data {
			if k == "aps" || k == "event_id" || k == "" || (k == "data" && n.RawData != nil) || (k == "receipt" && n.Receipt != "") {
				return nil, fmt.Errorf("data key %q is reserved", k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = append(b, ',')
			b = pushjson.AppendString(b, k)
			b = append(b, ':')
			b = pushjson.AppendString(b, n.Data[k])
		}
	}
	if n.RawData != nil {
		if !json.Valid(n.RawData) {
			return nil, fmt.Errorf("data is not JSON")
		}
		b = append(b, `,"data":`...)
		b = append(b, n.RawData...)
	}
	return append(b, '}'), nil
}
