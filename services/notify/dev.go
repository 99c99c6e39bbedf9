package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/notify-dev/notify/services/auth"
)

// envDev turns on dev mode, like --dev.
const envDev = "NOTIFY_DEV"

// Dev mode is the explicit choice to run on the public dev secrets (the
// JWT secret and VAPID key in the source) and to send to the local mock
// push service. Without it the API, push workers, `notify token` and
// `notify webpush` refuse to start when NOTIFY_API_JWT_SECRET or
// NOTIFY_VAPID_PRIVATE_KEY is missing, so a deployment that forgot a secret
// fails at start instead of running on one anybody can read. Dev mode
// itself is refused on a listen address other than loopback: a
// dev-secret service must not be reachable from another machine.

// devFlag registers --dev and returns the function that reports, after
// parsing, whether dev mode is on (--dev or NOTIFY_DEV).
func devFlag(fs *flag.FlagSet) func() (bool, error) {
	f := fs.Bool("dev", false, "dev mode: the public dev JWT secret and VAPID key when "+auth.EnvSecret+" / "+envVAPIDPrivateKey+
		" are unset, and the local mock push service on loopback; loopback listen addresses only ("+envDev+"=1)")
	return func() (bool, error) {
		env, err := devFromEnv()
		return *f || env, err
	}
}

// devFromEnv parses NOTIFY_DEV: unset, empty, 0 or false is off; 1 or true
// is on; anything else is an error naming the setting.
func devFromEnv() (bool, error) {
	v := strings.TrimSpace(os.Getenv(envDev))
	if v == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("invalid %s %q: want 1 (dev mode) or 0", envDev, v)
	}
	return on, nil
}

// checkDevListenEnv is checkDevListen for services with no dev behaviour
// of their own (cdc, fanout): NOTIFY_DEV set for a whole deployment is
// refused there too, so it cannot sit unnoticed beside non-loopback
// listeners.
func checkDevListenEnv(setting, addr string) error {
	dev, err := devFromEnv()
	if err != nil {
		return err
	}
	return checkDevListen(dev, setting, addr)
}

// checkDevListen refuses dev mode on addr unless it is a loopback address
// (127.0.0.0/8, ::1 or localhost). An empty host (":8080") listens on every
// interface and is refused too.
func checkDevListen(dev bool, setting, addr string) error {
	if !dev || addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q is not host:port: %w", setting, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("dev mode (--dev / %s) runs on public dev secrets and may only listen on loopback, but %s is %q: "+
		"listen on 127.0.0.1, or configure the secrets and drop dev mode", envDev, setting, addr)
}
