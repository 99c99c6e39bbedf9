package streams

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ParseBrokers splits a comma-separated host:port list and checks each entry,
// so a typo fails at start instead of as an endless dial loop.
func ParseBrokers(s string) ([]string, error) {
	var out []string
	for _, b := range strings.Split(s, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" {
			return nil, fmt.Errorf("broker %q is not host:port", b)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("broker %q has an invalid port", b)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no brokers given")
	}
	return out, nil
}

// ClientOpts returns the options every notify Kafka client starts from:
// the seed brokers and a client id naming the component, so broker logs and
// quotas can tell components apart.
// It carries the process's Security (UseSecurity): this is the one place
// every client is built from, so none connects without TLS or SASL the
// deployment asked for.
func ClientOpts(brokers []string, component string) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID("notify-" + component),
		// franz-go answers metadata lookups from a cache younger than this
		// (default 5 s). A short floor lets a topic created a moment ago, or
		// a broker that just came back, be seen within the 2 s the
		// recovery contract allows, at the cost of a few more metadata
		// requests while something is wrong.
		kgo.MetadataMinAge(250 * time.Millisecond),
	}, securityOpts()...)
}
