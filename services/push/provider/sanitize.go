package provider

import "strings"

// Sanitize keeps an answer's excerpt printable and on one line, at most n
// bytes (n ≤ 0: all of it), for a recorded reason or a log line: push
// services' bodies are their text, not ours.
func Sanitize(b []byte, n int) string {
	if n > 0 && len(b) > n {
		b = b[:n]
	}
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, string(b)))
}
