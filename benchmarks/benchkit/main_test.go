package benchkit

import (
	"os"
	"testing"

	"github.com/notify-dev/notify/internal/leaktest"
)

func TestMain(m *testing.M) { os.Exit(leaktest.Check(m.Run())) }
