package api

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
)

// checkAPNsTopic refuses a topic the server is not configured to send to
// (Config.APNsTopics): with one APNs key a team can push to each of its
// apps and their ".voip" and other suffixed topics, and a device must not
// pick which.
func (s *Server) checkAPNsTopic(req DeviceRequest) *Error {
	if req.Platform != PlatformAPNs || req.Topic == "" || s.cfg.AnyAPNsTopic || slices.Contains(s.cfg.APNsTopics, req.Topic) {
		return nil
	}
	if len(s.cfg.APNsTopics) == 0 {
		return newError(http.StatusBadRequest, errInvalidTopic,
			"topic %q: this server accepts no device topic (NOTIFY_APNS_TOPICS is not set); leave it out for the server's default", req.Topic)
	}
	return newError(http.StatusBadRequest, errInvalidTopic,
		"topic %q is not one of this server's bundle ids (NOTIFY_APNS_TOPICS): %s", req.Topic, strings.Join(s.cfg.APNsTopics, ", "))
}

// tokenOwnedElsewhere records a registration refused because another user
// holds the token: each is logged and counted
// (notify_api_device_token_conflicts_total), since a token registered
// first by someone who is not its device's user — squatted — sends that
// user's notifications to the device and keeps its owner out; see README,
// Security.
func (s *Server) tokenOwnedElsewhere(r *http.Request, user UUID, req DeviceRequest) {
	s.m.set.GetOrCreateCounter(`notify_api_device_token_conflicts_total{platform="` + req.Platform + `"}`).Inc()
	sum := sha256.Sum256([]byte(req.Platform + "\x00" + req.Token))
	s.log.Warn("device token registered by another user", "user", user.String(), "platform", req.Platform,
		"token_sha256", hex.EncodeToString(sum[:8]), "remote", r.RemoteAddr)
}
