// Package endpoint decides which Web Push endpoints notify accepts from
// browsers and which addresses a push worker may connect to.
//
// A subscription's endpoint is a URL the push worker later POSTs to, with
// the caller choosing every byte of it. Unchecked, that turns the worker
// into a proxy into the deployment's network (loopback, private ranges,
// the cloud metadata service) and into a port scanner whose answers show
// up in push_deliveries. Two checks close it:
//
//   - Policy.Check, when a subscription is created: https only, no user
//     info, no fragment, a valid port, and a host on the allow-list of
//     push services (by suffix; port 443 unless the entry names another;
//     IP literals only when listed as such).
//   - Policy.DialContext, when the worker connects: the host is checked
//     against the same list again (rows written before the check existed,
//     or a changed list), and the address the name resolved to is refused
//     when it is loopback, private, link-local (which holds the metadata
//     service 169.254.169.254), multicast, unspecified or otherwise not
//     publicly routable. The address is checked after resolution, in the
//     dialer's Control hook, so a name that resolves to a public address
//     when the subscription is made and to 127.0.0.1 when it is dialed (DNS
//     rebinding) is still refused.
//
// Dev mode (Options.Dev) adds the local mock push service: 127.0.0.1,
// [::1] and localhost on any port, and lets the dialer reach loopback.
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// EnvAllowedHosts names the environment variable that replaces
// DefaultAllowedHosts: comma-separated entries, see ParseAllowedHosts.
const EnvAllowedHosts = "NOTIFY_PUSH_ALLOWED_HOSTS"

// DefaultAllowedHosts are the public push services browsers hand out
// endpoints of: Chrome, Edge-on-Chromium, Opera, Samsung Internet and
// other Chromium browsers (FCM), Firefox (Mozilla autopush), Safari
// (Apple), and legacy Edge (WNS).
var DefaultAllowedHosts = []string{
	"fcm.googleapis.com",
	"updates.push.services.mozilla.com",
	"push.apple.com",
	"notify.windows.com",
}

// devAllowedHosts are added in dev mode: the mock push service.
var devAllowedHosts = []string{"127.0.0.1:*", "[::1]:*", "localhost:*"}

// Reasons a URL or an address is refused. Each is also an API error code.
const (
	ReasonInvalid           = "invalid_endpoint"             // not a URL, not https, no host
	ReasonUserInfo          = "endpoint_userinfo"            // https://user:pass@host/
	ReasonFragment          = "endpoint_fragment"            // https://host/#x
	ReasonInvalidPort       = "endpoint_invalid_port"        // port 0, above 65535, not a number
	ReasonIPLiteral         = "endpoint_ip_literal"          // an IP address not on the allow-list
	ReasonHostNotAllowed    = "endpoint_host_not_allowed"    // a host not on the allow-list
	ReasonPortNotAllowed    = "endpoint_port_not_allowed"    // an allowed host on a port its entry does not name
	ReasonAddressNotAllowed = "endpoint_address_not_allowed" // resolved to a loopback, private, … address
)

// ErrRefused is wrapped by every *Error, so a caller can tell a refusal
// by policy (permanent: the endpoint will never be dialed) from a network
// failure (worth retrying).
var ErrRefused = errors.New("push endpoint refused")

// Error is a refusal with its reason.
type Error struct {
	Reason string
	Msg    string
}

func (e *Error) Error() string { return "push endpoint refused: " + e.Msg }

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *Error) Unwrap() error { return ErrRefused }

func refuse(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// entry is one allow-list entry: a host suffix (or an exact IP) and the
// port it is allowed on; anyPort for "host:*".
type entry struct {
	host    string
	ip      netip.Addr // valid for IP literal entries, matched exactly
	port    int
	anyPort bool
}

func (e entry) matchesHost(host string, ip netip.Addr) bool {
	if e.ip.IsValid() || ip.IsValid() {
		return e.ip.IsValid() && ip.IsValid() && e.ip == ip
	}
	return host == e.host || strings.HasSuffix(host, "."+e.host)
}

func (e entry) allowsPort(port int) bool { return e.anyPort || port == e.port }

// Options configure a Policy.
type Options struct {
	// AllowedHosts are the allow-list entries (see ParseAllowedHosts).
	// Default (nil): DefaultAllowedHosts.
	AllowedHosts []string
	// Dev adds the local mock push service (loopback on any port) and lets
	// the dialer connect to loopback addresses. Never for production.
	Dev bool
}

// Policy is an immutable allow-list plus the address rules. Safe for
// concurrent use.
type Policy struct {
	entries       []entry
	allowLoopback bool
	allowed       string // the entries as given, for messages
}

// New validates o and returns its Policy.
func New(o Options) (*Policy, error) {
	hosts := o.AllowedHosts
	if hosts == nil {
		hosts = DefaultAllowedHosts
	}
	if len(hosts) == 0 {
		return nil, errors.New("push endpoint allow-list is empty: no subscription could ever be accepted")
	}
	if o.Dev {
		hosts = append(append([]string(nil), hosts...), devAllowedHosts...)
	}
	p := &Policy{allowLoopback: o.Dev, allowed: strings.Join(hosts, ",")}
	for _, h := range hosts {
		e, err := parseEntry(h)
		if err != nil {
			return nil, err
		}
		p.entries = append(p.entries, e)
	}
	return p, nil
}

// FromEnv builds the policy from EnvAllowedHosts (unset or empty:
// DefaultAllowedHosts), naming the variable when an entry is bad.
func FromEnv(getenv func(string) string, dev bool) (*Policy, error) {
	var hosts []string
	if v := strings.TrimSpace(getenv(EnvAllowedHosts)); v != "" {
		var err error
		if hosts, err = ParseAllowedHosts(v); err != nil {
			return nil, fmt.Errorf("invalid %s: %w", EnvAllowedHosts, err)
		}
	}
	p, err := New(Options{AllowedHosts: hosts, Dev: dev})
	if err != nil {
		return nil, fmt.Errorf("invalid %s: %w", EnvAllowedHosts, err)
	}
	return p, nil
}

// ParseAllowedHosts splits a comma-separated allow-list. Each entry is a
// host suffix ("push.apple.com" allows web.push.apple.com; a leading "*."
// or "." is accepted and ignored), optionally with ":port" (default 443)
// or ":*" (any port); an IP literal entry ("203.0.113.7:8443",
// "[2001:db8::1]") allows exactly that address.
func ParseAllowedHosts(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if _, err := parseEntry(f); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q has no entries", s)
	}
	return out, nil
}

func parseEntry(s string) (entry, error) {
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	host = strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(host, "*"), "."))
	e := entry{host: host, port: 443}
	switch port {
	case "":
	case "*":
		e.anyPort = true
	default:
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return entry{}, fmt.Errorf("entry %q: port must be 1-65535 or *", s)
		}
		e.port = n
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		e.ip = ip.Unmap()
		return e, nil
	}
	if host == "" || strings.ContainsAny(host, "/:@#?[] ") || strings.Contains(host, "..") || strings.HasSuffix(host, ".") {
		return entry{}, fmt.Errorf("entry %q is not a host name, host:port or IP", s)
	}
	return e, nil
}

// String lists the allow-list entries.
func (p *Policy) String() string { return p.allowed }

// Check validates a subscription endpoint. A nil error means the worker
// may try to send to it; the dial-time checks still apply.
func (p *Policy) Check(raw string) error {
	if strings.Contains(raw, "#") {
		return refuse(ReasonFragment, "endpoint must not have a fragment (#…)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return refuse(ReasonInvalid, "endpoint is not a URL")
	}
	switch {
	case u.Scheme != "https":
		return refuse(ReasonInvalid, "endpoint must be an https URL")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return refuse(ReasonInvalid, "endpoint must have a host")
	case u.User != nil:
		return refuse(ReasonUserInfo, "endpoint must not carry user info (user@)")
	}
	port := 443
	if ps := u.Port(); ps != "" || strings.HasSuffix(u.Host, ":") {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return refuse(ReasonInvalidPort, "endpoint port %q must be 1-65535", ps)
		}
		port = n
	}
	return p.checkHostPort(u.Hostname(), port)
}

// checkHostPort applies the allow-list to a host (name or IP literal) and
// port.
func (p *Policy) checkHostPort(host string, port int) error {
	host = strings.ToLower(host)
	ip, ipErr := netip.ParseAddr(host)
	if ipErr == nil {
		ip = ip.Unmap()
	}
	hostKnown := false
	for _, e := range p.entries {
		if !e.matchesHost(host, ip) {
			continue
		}
		if e.allowsPort(port) {
			return nil
		}
		hostKnown = true
	}
	switch {
	case hostKnown:
		return refuse(ReasonPortNotAllowed, "endpoint port %d is not allowed for %s (push services listen on 443)", port, host)
	case ipErr == nil:
		return refuse(ReasonIPLiteral, "endpoint host %s is an IP address; push services are named hosts", host)
	}
	return refuse(ReasonHostNotAllowed, "endpoint host %s is not a known push service (allowed: %s)", host, p.allowed)
}

// CheckAddr refuses an address that is not publicly routable: loopback
// (unless dev mode), private, shared (CGNAT, which also holds some cloud
// metadata services), link-local (169.254.169.254), multicast,
// unspecified, reserved and documentation ranges, and IPv4-mapped or
// NAT64 forms of those. IP literals on the allow-list are allowed as
// listed: the operator named them.
func (p *Policy) CheckAddr(ip netip.Addr) error {
	ip = ip.Unmap()
	for _, e := range p.entries {
		if e.ip.IsValid() && e.ip == ip {
			return nil
		}
	}
	if ip.IsLoopback() && p.allowLoopback {
		return nil
	}
	if ip.Is6() && nat64.Contains(ip) {
		// 64:ff9b::a.b.c.d reaches a.b.c.d through a NAT64 gateway.
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || ip.IsMulticast() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || !ip.IsGlobalUnicast() {
		return refuse(ReasonAddressNotAllowed, "address %s is not publicly routable", ip)
	}
	for _, r := range nonPublic {
		if r.Contains(ip) {
			return refuse(ReasonAddressNotAllowed, "address %s is in %s, not publicly routable", ip, r)
		}
	}
	return nil
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// nonPublic are the special-purpose ranges (RFC 6890 and successors) that
// netip's predicates do not cover.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT); Alibaba's metadata 100.100.100.200
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and 255.255.255.255
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments (Teredo, ORCHID, …)
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4: embeds any IPv4 address
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

// Control is a net.Dialer Control function: it runs after name resolution,
// before the connection is made, on the address actually dialed.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return refuse(ReasonAddressNotAllowed, "address %q: %v", address, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return refuse(ReasonAddressNotAllowed, "address %q is not an IP address", address)
	}
	return p.CheckAddr(ip)
}

// Dialer returns a dial function for the push worker's client: the host
// and port are checked against the allow-list, and each address the name
// resolves to against CheckAddr, before anything is sent.
func (p *Policy) Dialer(keepAlive time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{KeepAlive: keepAlive, Control: p.Control}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, ps, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, refuse(ReasonInvalid, "address %q: %v", addr, err)
		}
		port, err := strconv.Atoi(ps)
		if err != nil || port < 1 || port > 65535 {
			return nil, refuse(ReasonInvalidPort, "address %q: port must be 1-65535", addr)
		}
		if err := p.checkHostPort(host, port); err != nil {
			return nil, err
		}
		return d.DialContext(ctx, network, addr)
	}
}
