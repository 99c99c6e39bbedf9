package roster

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// splitEnvelope finds the top-level "schema" and "payload" members of a
// JsonConverter envelope in one pass over b, without decoding them. With
// schemas.enable=true every record carries its table's whole schema
// (about 2 KB, four times the row): decoding it with encoding/json, only
// to find the schema cached already, was most of the decoder's time. ok is
// false when b is not a JSON object of string keys this scanner can
// follow; the caller then decodes b the ordinary way, which also reports
// what is wrong with it. The spans are validated where they are decoded.
func splitEnvelope(b []byte) (schema, payload []byte, ok bool) {
	ok = members(b, func(key, val []byte) bool {
		switch string(key) {
		case "schema":
			schema = val
		case "payload":
			payload = val
		}
		return true
	})
	return schema, payload, ok && payload != nil
}

// members calls fn with each member of the JSON object b: its key (the
// bytes between the quotes) and its value's bytes. It reports false when b
// is not an object this scanner can follow, a key is not plain (an
// escape, a control character or bytes that are not UTF-8: its bytes are
// not its name), or fn returns false.
func members(b []byte, fn func(key, val []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i++
	for first := true; ; first = false {
		i = skipSpace(b, i)
		if first && i < len(b) && b[i] == '}' {
			return skipSpace(b, i+1) == len(b)
		}
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end, ok := scanString(b, i)
		if !ok {
			return false
		}
		key := b[i+1 : end-1]
		if !plainBytes(b[i:end]) {
			return false // an escape, a control character, not UTF-8
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		vend, ok := scanValue(b, i)
		if !ok || !fn(key, b[i:vend]) {
			return false
		}
		i = skipSpace(b, vend)
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		if i < len(b) && b[i] == '}' {
			return skipSpace(b, i+1) == len(b)
		}
		return false
	}
}

// fastEvent reads a Debezium payload with members instead of
// encoding/json (a third of the time: no reflection, no validation of the
// members it does not read). ok false: b is something else, and the
// caller decodes it with encoding/json, which says what is wrong.
func fastEvent(b []byte) (ev event, ok bool) {
	row := func(v []byte) (map[string]json.RawMessage, bool) {
		if isNull(v) {
			return nil, true
		}
		m := make(map[string]json.RawMessage, 8)
		return m, members(v, func(k, v []byte) bool { m[string(k)] = v; return true })
	}
	ok = members(b, func(key, val []byte) bool {
		var ok bool
		switch string(key) {
		case "before":
			ev.Before, ok = row(val)
		case "after":
			ev.After, ok = row(val)
		case "op":
			var op string
			if op, ok = plainString(val); ok {
				ev.Op = op
			}
		case "ts_ms":
			ev.TsMs, ok = optInt(val)
		case "source":
			if isNull(val) {
				ev.Source, ok = nil, true
				break
			}
			ev.Source = &source{}
			ok = members(val, func(k, v []byte) bool {
				var ok bool
				switch string(k) {
				case "lsn":
					ev.Source.LSN, ok = optInt(v)
				case "ts_ms":
					ev.Source.TsMs, ok = optInt(v)
				default:
					ok = !foldsTo(k, "lsn", "ts_ms")
				}
				return ok
			})
		case "schema", "payload":
			ok = false // an envelope: not a payload
		default:
			// encoding/json matches keys case-insensitively: leave
			// "After" and the like to it.
			ok = !foldsTo(key, "before", "after", "op", "ts_ms", "source", "schema", "payload")
		}
		return ok
	})
	return ev, ok && ev.Op != ""
}

func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// plainString is a JSON string without escapes or control characters,
// whose bytes are its value.
func plainString(v []byte) (string, bool) {
	if !plainBytes(v) {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

// plainBytes reports whether v is such a string, without making it one:
// members checks every key of every object this way (a string per key
// was a fifth of the decoder's allocations).
func plainBytes(v []byte) bool {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	for _, c := range v[1 : len(v)-1] {
		if c == '\\' || c < 0x20 {
			return false
		}
	}
	return utf8.Valid(v[1 : len(v)-1])
}

// optInt is a JSON integer or null.
func optInt(v []byte) (*int64, bool) {
	if isNull(v) {
		return nil, true
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return nil, false
	}
	return &n, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index after the string starting at b[i] == '"'.
func scanString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// scanValue returns the index after the value starting at b[i]: a string,
// or everything up to the bracket closing an object or array, or a
// literal up to the next delimiter.
func scanValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return scanString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := scanString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	return j, j > i
}
