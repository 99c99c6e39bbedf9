package main

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// NOTIFY_APNS_TOPICS, else NOTIFY_APNS_TOPIC, decides which topics an APNs
// device may name; with neither, dev mode takes any and production none;
// a bad list stops the API at start, naming the setting.
func TestAPNsTopicsFromEnv(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		topics, topic string
		dev           bool
		want          []string
		anyTopic      bool
	}{
		{"org.example.app, org.example.app.voip", "x.y", false, []string{"org.example.app", "org.example.app.voip"}, false},
		{"", "org.example.app", false, []string{"org.example.app"}, false},
		{"", "", false, nil, false},
		{"", "", true, nil, true},
	} {
		t.Setenv(envAPNsTopics, c.topics)
		t.Setenv(envAPNsTopic, c.topic)
		got, anyTopic, err := apnsTopicsFromEnv(log, c.dev)
		if err != nil || !slices.Equal(got, c.want) || anyTopic != c.anyTopic {
			t.Errorf("%+v: %v %v %v", c, got, anyTopic, err)
		}
	}
	for _, bad := range []string{"a,,b", "org.example app", ","} {
		t.Setenv(envAPNsTopics, bad)
		var out, errb bytes.Buffer
		if code := mainErr([]string{"run", "api", "--dev"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), envAPNsTopics) {
			t.Errorf("%s=%q: exit %d, stderr %q; want a failure naming it", envAPNsTopics, bad, code, errb.String())
		}
	}
}
