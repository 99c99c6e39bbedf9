package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/notify-dev/notify/services/push/apns"
)

// envAPNsTopics lists the APNs topics a device may name at registration
// (api.Config.APNsTopics).
const envAPNsTopics = "NOTIFY_APNS_TOPICS"

// apnsTopicsFromEnv reads the topics a registering APNs device may name:
// NOTIFY_APNS_TOPICS (comma-separated bundle ids), else the worker's one
// NOTIFY_APNS_TOPIC. With neither set, dev mode accepts any topic and
// production none (a device then names no topic and gets the worker's).
func apnsTopicsFromEnv(log *slog.Logger, dev bool) (topics []string, anyTopic bool, err error) {
	raw := strings.TrimSpace(os.Getenv(envAPNsTopics))
	if raw == "" {
		if t := strings.TrimSpace(os.Getenv(envAPNsTopic)); t != "" {
			if err := apns.ValidateTopic(t); err != nil {
				return nil, false, fmt.Errorf("invalid %s: %w", envAPNsTopic, err)
			}
			return []string{t}, false, nil
		}
		if dev {
			log.Warn("dev mode: " + envAPNsTopics + " is not set: APNs devices may name any topic")
			return nil, true, nil
		}
		log.Info(envAPNsTopics + " is not set: an APNs device naming a topic is refused (it gets the worker's " + envAPNsTopic + ")")
		return nil, false, nil
	}
	for _, t := range strings.Split(raw, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			return nil, false, fmt.Errorf("invalid %s %q: an empty topic between commas", envAPNsTopics, raw)
		}
		if err := apns.ValidateTopic(t); err != nil {
			return nil, false, fmt.Errorf("invalid %s: %w", envAPNsTopics, err)
		}
		topics = append(topics, t)
	}
	return topics, false, nil
}
