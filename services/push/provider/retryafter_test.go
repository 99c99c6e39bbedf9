package provider

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 120 * time.Second, true},
		{" 0 ", 0, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Sat, 01 Mar 2025 12:01:30 GMT", 90 * time.Second, true},
		{"Saturday, 01-Mar-25 12:01:30 GMT", 90 * time.Second, true}, // RFC 850
		{"Sat Mar  1 12:01:30 2025", 90 * time.Second, true},         // asctime
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},       // past: no wait
		{"", 0, false},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"99999999999999999999", 0, false},
	} {
		got, ok := ParseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
