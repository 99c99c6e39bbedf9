package apns

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// appendBody appends n's JSON body:
//
//	{"aps":{"alert":{"title":…,"body":…}},"event_id":…,<Data, by key>}
//
// encoded by hand rather than through encoding/json: it is the one
// allocation-heavy step left per send, and its shape is fixed.
func appendBody(b []byte, n Notification) ([]byte, error) {
	b = append(b, `{"aps":{"alert":{"title":`...)
	b = appendString(b, n.Title)
	if n.Body != "" {
		b = append(b, `,"body":`...)
		b = appendString(b, n.Body)
	}
	b = append(b, `}}`...)
	if n.EventID != "" {
		b = append(b, `,"event_id":`...)
		b = appendString(b, n.EventID)
	}
	if len(n.Data) > 0 {
		keys := make([]string, 0, len(n.Data))
		for k := range n.Data {
			if k == "aps" || k == "event_id" || k == "" {
				return nil, fmt.Errorf("data key %q is reserved", k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = append(b, ',')
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, n.Data[k])
		}
	}
	return append(b, '}'), nil
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD (as encoding/json
// does), HTML characters left alone (the body is never embedded in HTML).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' { // valid JSON, but not valid JavaScript
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
