package endpoint

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func mustPolicy(t *testing.T, o Options) *Policy {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return ""
}

// The cases the outside review reproduced, plus the allow-list's edges.
func TestCheck(t *testing.T) {
	prod := mustPolicy(t, Options{})
	dev := mustPolicy(t, Options{Dev: true})
	custom := mustPolicy(t, Options{AllowedHosts: []string{"*.push.example.com:8443", "203.0.113.7", "push.example.org:*"}})
	for _, c := range []struct {
		url             string
		prod, dev, cust string // expected reason, "" = accepted
	}{
		{"https://fcm.googleapis.com/fcm/send/abc:def", "", "", ReasonHostNotAllowed},
		{"https://FCM.googleapis.com/fcm/send/x", "", "", ReasonHostNotAllowed},
		{"https://updates.push.services.mozilla.com/wpush/v2/x", "", "", ReasonHostNotAllowed},
		{"https://web.push.apple.com/QGx", "", "", ReasonHostNotAllowed},
		{"https://wns2-by3p.notify.windows.com/w/?token=x", "", "", ReasonHostNotAllowed},
		{"https://fcm.googleapis.com:443/x", "", "", ReasonHostNotAllowed},
		{"https://fcm.googleapis.com:8443/x", ReasonPortNotAllowed, ReasonPortNotAllowed, ReasonHostNotAllowed},
		{"https://evilfcm.googleapis.com.attacker.net/x", ReasonHostNotAllowed, ReasonHostNotAllowed, ReasonHostNotAllowed},
		{"https://notfcm.googleapis.com/x", ReasonHostNotAllowed, ReasonHostNotAllowed, ReasonHostNotAllowed}, // a suffix matches at a dot
		{"https://xpush.apple.com/x", ReasonHostNotAllowed, ReasonHostNotAllowed, ReasonHostNotAllowed},
		{"https://127.0.0.1:8443/push/x", ReasonIPLiteral, "", ReasonIPLiteral},
		{"https://127.0.0.1/push/x", ReasonIPLiteral, "", ReasonIPLiteral},
		{"https://[::1]:8443/x", ReasonIPLiteral, "", ReasonIPLiteral},
		{"https://[::ffff:127.0.0.1]:8443/x", ReasonIPLiteral, "", ReasonIPLiteral},
		{"https://localhost:8443/x", ReasonHostNotAllowed, "", ReasonHostNotAllowed},
		{"https://0.0.0.0/x", ReasonIPLiteral, ReasonIPLiteral, ReasonIPLiteral},
		{"https://169.254.169.254/latest/meta-data", ReasonIPLiteral, ReasonIPLiteral, ReasonIPLiteral},
		{"https://metadata.google.internal/computeMetadata/v1/", ReasonHostNotAllowed, ReasonHostNotAllowed, ReasonHostNotAllowed},
		{"https://10.0.0.1/x", ReasonIPLiteral, ReasonIPLiteral, ReasonIPLiteral},
		{"https://2130706433/x", ReasonHostNotAllowed, ReasonHostNotAllowed, ReasonHostNotAllowed}, // 127.0.0.1 as one number
		{"https://fcm.googleapis.com:0/x", ReasonInvalidPort, ReasonInvalidPort, ReasonInvalidPort},
		{"https://fcm.googleapis.com:99999/x", ReasonInvalidPort, ReasonInvalidPort, ReasonInvalidPort},
		{"https://127.0.0.1:0/x", ReasonInvalidPort, ReasonInvalidPort, ReasonInvalidPort},
		{"https://127.0.0.1:99999/x", ReasonInvalidPort, ReasonInvalidPort, ReasonInvalidPort},
		{"https://fcm.googleapis.com:/x", ReasonInvalidPort, ReasonInvalidPort, ReasonInvalidPort},
		{"https://fcm.googleapis.com/x#frag", ReasonFragment, ReasonFragment, ReasonFragment},
		{"https://fcm.googleapis.com/x#", ReasonFragment, ReasonFragment, ReasonFragment},
		{"https://u:p@fcm.googleapis.com/x", ReasonUserInfo, ReasonUserInfo, ReasonUserInfo},
		{"https://u@fcm.googleapis.com/x", ReasonUserInfo, ReasonUserInfo, ReasonUserInfo},
		{"http://fcm.googleapis.com/x", ReasonInvalid, ReasonInvalid, ReasonInvalid},
		{"fcm.googleapis.com/x", ReasonInvalid, ReasonInvalid, ReasonInvalid},
		{"https:fcm.googleapis.com", ReasonInvalid, ReasonInvalid, ReasonInvalid},
		{"https:///x", ReasonInvalid, ReasonInvalid, ReasonInvalid},
		{"https://a.push.example.com:8443/x", ReasonHostNotAllowed, ReasonHostNotAllowed, ""},
		{"https://push.example.com:8443/x", ReasonHostNotAllowed, ReasonHostNotAllowed, ""},
		{"https://a.push.example.com/x", ReasonHostNotAllowed, ReasonHostNotAllowed, ReasonPortNotAllowed},
		{"https://203.0.113.7/x", ReasonIPLiteral, ReasonIPLiteral, ""},
		{"https://203.0.113.7:444/x", ReasonIPLiteral, ReasonIPLiteral, ReasonPortNotAllowed},
		{"https://push.example.org:1/x", ReasonHostNotAllowed, ReasonHostNotAllowed, ""},
	} {
		for _, pc := range []struct {
			name string
			p    *Policy
			want string
		}{{"default", prod, c.prod}, {"dev", dev, c.dev}, {"custom", custom, c.cust}} {
			err := pc.p.Check(c.url)
			if got := reason(err); got != pc.want {
				t.Errorf("%s: Check(%q) = %q (%v), want %q", pc.name, c.url, got, err, pc.want)
			}
			if err != nil && !errors.Is(err, ErrRefused) {
				t.Errorf("%s: Check(%q): %v does not wrap ErrRefused", pc.name, c.url, err)
			}
		}
	}
}

func TestCheckAddr(t *testing.T) {
	prod := mustPolicy(t, Options{})
	dev := mustPolicy(t, Options{Dev: true})
	listed := mustPolicy(t, Options{AllowedHosts: []string{"10.1.2.3:8443"}})
	for _, c := range []struct {
		addr      string
		prod, dev bool // allowed?
	}{
		{"142.250.185.10", true, true}, // a public address
		{"2a00:1450:4001:82b::200a", true, true},
		{"127.0.0.1", false, true},
		{"127.8.9.10", false, true},
		{"::1", false, true},
		{"::ffff:127.0.0.1", false, true},
		{"0.0.0.0", false, false},
		{"::", false, false},
		{"169.254.169.254", false, false},
		{"::ffff:169.254.169.254", false, false},
		{"fd00:ec2::254", false, false}, // AWS metadata over IPv6
		{"100.100.100.200", false, false},
		{"10.0.0.1", false, false},
		{"::ffff:10.0.0.1", false, false},
		{"172.16.5.4", false, false},
		{"192.168.1.1", false, false},
		{"fe80::1", false, false},
		{"224.0.0.1", false, false},
		{"ff02::1", false, false},
		{"255.255.255.255", false, false},
		{"64:ff9b::a00:1", false, false},  // NAT64 of 10.0.0.1
		{"64:ff9b::7f00:1", false, false}, // NAT64 of 127.0.0.1
		{"2002:7f00:1::", false, false},   // 6to4 of 127.0.0.1
		{"198.18.0.1", false, false},
	} {
		ip := netip.MustParseAddr(c.addr)
		if got := prod.CheckAddr(ip) == nil; got != c.prod {
			t.Errorf("default: CheckAddr(%s) allowed=%v, want %v", c.addr, got, c.prod)
		}
		if got := dev.CheckAddr(ip) == nil; got != c.dev {
			t.Errorf("dev: CheckAddr(%s) allowed=%v, want %v", c.addr, got, c.dev)
		}
		// Control sees the same address as "ip:port" after resolution.
		err := prod.Control("tcp", net.JoinHostPort(c.addr, "443"), nil)
		if (err == nil) != c.prod {
			t.Errorf("Control(%s) = %v, want allowed=%v", c.addr, err, c.prod)
		}
	}
	if err := listed.CheckAddr(netip.MustParseAddr("10.1.2.3")); err != nil {
		t.Errorf("an IP the operator listed is refused at dial: %v", err)
	}
}

// The dialer refuses before connecting: names off the allow-list are not
// even resolved, and a listed name that resolves to loopback (what DNS
// rebinding looks like from here) is refused by Control. Only loopback
// listeners are dialed.
func TestDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// "localhost" listed with the listener's port but without dev mode:
	// the name passes the allow-list, the resolved 127.0.0.1 does not.
	rebind := mustPolicy(t, Options{AllowedHosts: []string{"localhost:" + port}})
	for _, addr := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::ffff:127.0.0.1]:" + port, "169.254.169.254:443",
		"10.0.0.1:443", "0.0.0.0:" + port, "metadata.google.internal:80", "[::1]:" + port, "localhost:0", "localhost:99999"} {
		c, err := rebind.Dialer(time.Second)(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			t.Errorf("dial %s: connected", addr)
			continue
		}
		if !errors.Is(err, ErrRefused) {
			t.Errorf("dial %s: %v, want a refusal by policy", addr, err)
		}
	}
	// Production defaults refuse the same without resolving anything.
	prod := mustPolicy(t, Options{})
	if _, err := prod.Dialer(time.Second)(ctx, "tcp", "127.0.0.1:"+port); reason(err) != ReasonIPLiteral {
		t.Errorf("default policy dial 127.0.0.1: %v", err)
	}
	select {
	case <-accepted:
		t.Fatal("the listener accepted a connection the policy refused")
	default:
	}

	// Dev mode reaches the loopback mock.
	dev := mustPolicy(t, Options{Dev: true})
	for _, addr := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		c, err := dev.Dialer(time.Second)(ctx, "tcp", addr)
		if err != nil {
			t.Fatalf("dev dial %s: %v", addr, err)
		}
		c.Close()
		<-accepted
	}
}

func TestAllowedHostsConfig(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvAllowedHosts {
				return v
			}
			return ""
		}
	}
	p, err := FromEnv(env(""), false)
	if err != nil || p.Check("https://fcm.googleapis.com/x") != nil {
		t.Fatalf("unset: %v", err)
	}
	p, err = FromEnv(env(" push.example.com , *.other.example:8443 "), false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Check("https://fcm.googleapis.com/x") == nil {
		t.Error("the variable replaces the defaults, but fcm is still allowed")
	}
	if p.Check("https://a.push.example.com/x") != nil || p.Check("https://b.other.example:8443/x") != nil {
		t.Errorf("configured hosts refused (%s)", p)
	}
	for _, bad := range []string{",", "host:0", "host:70000", "host:x", "a/b", "user@host", "a..b", "host."} {
		if _, err := FromEnv(env(bad), false); err == nil || !strings.Contains(err.Error(), EnvAllowedHosts) {
			t.Errorf("%q: %v, want an error naming %s", bad, err, EnvAllowedHosts)
		}
	}
}
