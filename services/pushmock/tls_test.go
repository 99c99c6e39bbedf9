package pushmock_test

import (
	"crypto/tls"

	"github.com/notify-dev/notify/services/pushmock"
)

func tlsConfig(m *pushmock.Server) *tls.Config { return &tls.Config{RootCAs: m.CertPool()} }
