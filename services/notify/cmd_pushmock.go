package main

import (
	"context"
	"flag"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/notify-dev/notify/services/pushmock"
)

func init() {
	registerService(serviceDef{
		name:    "pushmock",
		summary: "mock Web Push service (TLS, HTTP/2) for tests and benchmarks",
		flags:   pushmockFlags,
	})
}

func pushmockFlags(fs *flag.FlagSet) func(ctx context.Context, log *slog.Logger) (*hosted, error) {
	var c pushmock.Config
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8443", "listen address (port 0 picks a free port)")
	fs.StringVar(&c.CertFile, "cert-file", envOr(envPushCAFile, ".local/pushmock/cert.pem"),
		"where to write the self-signed certificate senders trust with --ca ("+envPushCAFile+" sets both)")
	fs.DurationVar(&c.Latency, "latency", 230e6, "delay before every answer (0 for none)")
	fs.DurationVar(&c.Jitter, "jitter", 0, "spread the latency uniformly over latency ± jitter")
	fs.BoolVar(&c.PerTopic, "per-topic", false, "count Web Push duplicates per (subscription, Topic) instead of per subscription: exact over many events to the same subscriptions")
	fs.Float64Var(&c.Rate429, "rate-429", 0, "fraction of good requests answered 429 with --retry-after")
	fs.DurationVar(&c.RetryAfter, "retry-after", 1e9, "Retry-After a 429 asks for (sent as whole seconds, rounded up)")
	fs.BoolVar(&c.RetryAfterDate, "retry-after-date", false, "send Retry-After as an HTTP date instead of seconds")
	fs.Float64Var(&c.Rate5xx, "rate-5xx", 0, "fraction of good requests answered 503")
	fs.Float64Var(&c.GoneFraction, "gone-fraction", 0, "fraction of ids (a fixed, hash-chosen set) that always answer 410 Gone")
	fs.Float64Var(&c.Always5xxFraction, "always-5xx-fraction", 0, "fraction of ids (a fixed, hash-chosen set) that always answer 500")
	fs.Float64Var(&c.DecryptSample, "decrypt-sample", 0, "fraction of ids whose messages are decrypted with keys re-derived from --seed")
	fs.Int64Var(&c.Seed, "seed", 1, "seed the subscriptions were generated with (notify seed --seed)")
	fs.IntVar(&c.MaxStreams, "max-streams", 1000, "HTTP/2 concurrent streams per connection")
	fs.StringVar(&c.WebSocketAddr, "ws-addr", "", "also speak Mozilla's push protocol here (ws://; a Firefox's dom.push.serverURL), forwarding pushes to /moz/<channel> to the browser")
	apnsDevFlag := apnsMockFlags(fs, &c.APNs)
	fs.StringVar(&c.FCMCredentialsFile, "fcm-credentials", "",
		"FCM side: service-account JSON whose key the token endpoint trusts, written with fresh dev credentials when missing; default fcm-service-account.json beside --cert-file ("+devFCMCredentialsFile+"), off for no FCM side")
	fs.DurationVar(&c.FCMTokenLifetime, "fcm-token-lifetime", time.Hour, "FCM side: lifetime of the access tokens it issues")
	return func(ctx context.Context, log *slog.Logger) (*hosted, error) {
		if c.Latency == 0 {
			c.Latency = pushmock.NoLatency
		}
		switch c.FCMCredentialsFile {
		case "":
			c.FCMCredentialsFile = filepath.Join(filepath.Dir(c.CertFile), "fcm-service-account.json")
		case "off":
			c.FCMCredentialsFile = ""
		}
		c.Logger = log
		if err := apnsMockCredentials(log, &c.APNs, apnsDevDir(*apnsDevFlag, c.CertFile)); err != nil {
			return nil, err
		}
		m, err := pushmock.New(c)
		if err != nil {
			return nil, err
		}
		return &hosted{svc: m}, nil
	}
}
