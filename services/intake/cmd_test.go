package intake_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/notify-dev/notify/services/notify/notifytest"
)

// `notify run intake` refuses to start on bad settings, naming them, before
// it touches Postgres or Kafka.
func TestRunIntakeRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--allowed-sources", "/a/"}, "--topic"},
		{[]string{"--topic", "t"}, "--allowed-sources"},
		{[]string{"--topic", "t", "--allowed-sources", `[{"prefix":"/a/","courses":false}]`}, "allows no audience"},
		{[]string{"--topic", "t", "--allowed-sources", `[{"prefix":"/a/","types":["Bad Type"]}]`}, "--allowed-sources"},
		{[]string{"--topic", "t", "--allowed-sources", "@/nonexistent/rules.json"}, "--allowed-sources"},
		{[]string{"--topic", "notify.intake.dlq", "--allowed-sources", "/a/"}, "dead-letter topic"},
		{[]string{"--topic", "t,t", "--allowed-sources", "/a/"}, "given twice"},
	} {
		cmd := exec.Command(notifytest.Binary(t), append([]string{"run", "intake", "--metrics-addr", "off", "--wait-infra", "1s"}, c.args...)...)
		cmd.Env = append(cmd.Environ(), "NOTIFY_INTAKE_TOPICS=", "NOTIFY_INTAKE_ALLOWED_SOURCES=")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: %v, output %q; want a failure naming %q", c.args, err, out, c.want)
		}
	}
}
