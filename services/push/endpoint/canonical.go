package endpoint

import (
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Canonical is the one spelling of a push endpoint URL that every
// spelling reaching the same push-service resource shares, so that
// endpoints can be compared — above all, who owns one — as strings. It
// applies RFC 3986 §6.2.2 syntax-based normalisation and the https scheme
// rules:
//
//   - scheme and host in lower case, a trailing dot of the host dropped,
//     an IPv6 literal in its RFC 5952 form;
//   - the default port (443, or an empty ":") dropped, another port
//     without leading zeros;
//   - percent-encoding normalised: unreserved characters decoded, the hex
//     of the rest in upper case, bytes that may not appear raw encoded;
//   - dot segments resolved (after decoding, so %2E counts), an empty path
//     made "/";
//   - an empty query ("?") and the fragment (never sent) dropped.
//
// The path's case and reserved characters (%2F stays %2F) are kept: the
// push service sees them. A URL that is not https, has user info or no
// host, or has a bad port or percent-encoding is refused with the same
// reasons Check gives (an *Error wrapping ErrRefused). Canonical says
// nothing about the allow-list: Check does.
func Canonical(raw string) (string, error) {
	raw, _, _ = strings.Cut(raw, "#")
	u, err := url.Parse(raw)
	if err != nil {
		return "", refuse(ReasonInvalid, "endpoint is not a URL")
	}
	switch {
	case u.Scheme != "https":
		return "", refuse(ReasonInvalid, "endpoint must be an https URL")
	case u.User != nil:
		return "", refuse(ReasonUserInfo, "endpoint must not carry user info (user@)")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return "", refuse(ReasonInvalid, "endpoint must have a host")
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		ip, err := netip.ParseAddr(host)
		if err != nil || ip.Zone() != "" {
			return "", refuse(ReasonInvalid, "endpoint host %q is not a valid IPv6 address", host)
		}
		host = "[" + ip.String() + "]"
	} else {
		host = strings.TrimSuffix(host, ".")
		if host == "" {
			return "", refuse(ReasonInvalid, "endpoint must have a host")
		}
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", refuse(ReasonInvalidPort, "endpoint port %q must be 1-65535", ps)
		}
		if n != 443 {
			host += ":" + strconv.Itoa(n)
		}
	}
	path, ok := normalizePercent(u.EscapedPath())
	if !ok {
		return "", refuse(ReasonInvalid, "endpoint path has a bad percent-encoding")
	}
	path = removeDotSegments(path)
	var sb strings.Builder
	sb.Grow(len("https://") + len(host) + len(path) + len(u.RawQuery) + 1)
	sb.WriteString("https://")
	sb.WriteString(host)
	sb.WriteString(path)
	if u.RawQuery != "" {
		q, ok := normalizePercent(u.RawQuery)
		if !ok {
			return "", refuse(ReasonInvalid, "endpoint query has a bad percent-encoding")
		}
		sb.WriteByte('?')
		sb.WriteString(q)
	}
	return sb.String(), nil
}

// normalizePercent decodes percent-encoded unreserved characters, writes
// the hex of other encoded bytes in upper case and encodes bytes that are
// neither unreserved nor reserved. It reports false for a '%' not
// followed by two hex digits.
func normalizePercent(s string) (string, bool) {
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	sb.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) {
				return "", false
			}
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if !ok1 || !ok2 {
				return "", false
			}
			b := hi<<4 | lo
			if unreserved(b) {
				sb.WriteByte(b)
			} else {
				sb.WriteByte('%')
				sb.WriteByte(hex[b>>4])
				sb.WriteByte(hex[b&15])
			}
			i += 2
		case unreserved(c) || strings.IndexByte(":/?#[]@!$&'()*+,;=", c) >= 0:
			sb.WriteByte(c)
		default:
			sb.WriteByte('%')
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&15])
		}
	}
	return sb.String(), true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unreserved: RFC 3986 §2.3.
func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// removeDotSegments is RFC 3986 §5.2.4 for an absolute path.
func removeDotSegments(path string) string {
	var out []string
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	if len(out) == 1 && out[0] == "" {
		return "/"
	}
	return strings.Join(out, "/")
}
