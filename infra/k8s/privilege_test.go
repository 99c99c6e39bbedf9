package k8s

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// settingsRead is every NOTIFY_* name quoted in the module's non-test Go source: the
// settings the binary can read.
func settingsRead(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`"(NOTIFY_[A-Z0-9_]+)"`)
	read := map[string]bool{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "../..") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			read[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return read
}

// TestSecretsNameWhatTheCodeReads: every key of secrets.yaml is a setting the binary
// reads, or a file name (mounted, its path given by such a setting) — a key nothing reads
// is a credential an operator fills in for nothing.
func TestSecretsNameWhatTheCodeReads(t *testing.T) {
	_, m := load(t)
	read := settingsRead(t)
	for name, s := range m.secrets {
		for k := range s.StringData {
			switch {
			case strings.HasPrefix(k, "NOTIFY_") && !read[k]:
				t.Errorf("Secret %s key %s: no code reads that setting", name, k)
			case !strings.HasPrefix(k, "NOTIFY_") && !strings.Contains(k, "."):
				t.Errorf("Secret %s key %s: neither a NOTIFY_ setting nor a file name", name, k)
			}
		}
	}
}

// TestAPIHoldsNoSigningKeys: the API serves the VAPID public key and never signs, so it
// gets none of the private credentials.
func TestAPIHoldsNoSigningKeys(t *testing.T) {
	_, m := load(t)
	d := m.deployments["notify-api"]
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "NOTIFY_VAPID_PRIVATE_KEY" || strings.HasPrefix(e.Name, "NOTIFY_APNS_KEY") || strings.HasPrefix(e.Name, "NOTIFY_FCM_") {
			t.Errorf("the api gets %s; it never signs a push", e.Name)
		}
	}
}

// TestNetworkPolicies: ingress is denied by default; each Deployment's metrics port is
// open only to a selected namespace (never to all), and the API's port to all.
func TestNetworkPolicies(t *testing.T) {
	_, m := load(t)
	var denyAll bool
	for _, p := range m.policies {
		if len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 &&
			slices.Contains(p.Spec.PolicyTypes, "Ingress") && len(p.Spec.Ingress) == 0 {
			denyAll = true
		}
	}
	if !denyAll {
		t.Error("no default-deny ingress NetworkPolicy (podSelector {}, policyTypes [Ingress], no rules)")
	}
	// allowed reports whether some rule selecting the pod admits its port, and whether
	// one admits it from everywhere.
	allowed := func(podLabels map[string]string, ctr corev1.Container, port int32) (admitted, open bool) {
		for _, p := range m.policies {
			sel, err := metaSelector(&p.Spec.PodSelector)
			if err != nil || !sel.Matches(labels.Set(podLabels)) {
				continue
			}
			for _, r := range p.Spec.Ingress {
				for _, rp := range r.Ports {
					if rp.Port == nil || containerPort(ctr, *rp.Port) == port {
						admitted = true
						open = open || len(r.From) == 0
					}
				}
				if len(r.Ports) == 0 {
					admitted = true
					open = open || len(r.From) == 0
				}
			}
		}
		return admitted, open
	}
	for _, c := range components {
		d := m.deployments[c.deployment]
		ctr := d.Spec.Template.Spec.Containers[0]
		pl := d.Spec.Template.Labels
		if ok, open := allowed(pl, ctr, c.metricsPort); !ok || open {
			t.Errorf("%s: metrics port %d admitted %v, from everywhere %v; want admitted from the monitoring namespace only", c.deployment, c.metricsPort, ok, open)
		}
		if c.port != c.metricsPort {
			if ok, open := allowed(pl, ctr, c.port); !ok || !open {
				t.Errorf("%s: port %d not open to its clients", c.deployment, c.port)
			}
		}
	}
}

// TestEachServiceItsOwnRole: every Deployment and the migrate Job take NOTIFY_DATABASE_URL
// from a Secret of their own, annotated with the Postgres role of infra/roles.sql it logs
// in as — never one URL (one role) for all.
func TestEachServiceItsOwnRole(t *testing.T) {
	_, m := load(t)
	roles, err := os.ReadFile("../roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]corev1.PodSpec{"migrate": m.jobs["notify-migrate"].Spec.Template.Spec}
	for name, d := range m.deployments {
		pods[strings.TrimPrefix(name, "notify-")] = d.Spec.Template.Spec
	}
	seen := map[string]string{}
	for svc, pod := range pods {
		var ref *corev1.SecretKeySelector
		for _, e := range pod.Containers[0].Env {
			if e.Name == "NOTIFY_DATABASE_URL" && e.ValueFrom != nil {
				ref = e.ValueFrom.SecretKeyRef
			}
		}
		if ref == nil {
			t.Errorf("%s: NOTIFY_DATABASE_URL is not from a Secret", svc)
			continue
		}
		if other, ok := seen[ref.Name]; ok {
			t.Errorf("%s and %s share the database Secret %s: one role for both", svc, other, ref.Name)
		}
		seen[ref.Name] = svc
		s := m.secrets[ref.Name]
		if s == nil {
			continue // checkPod reports it
		}
		role := s.Annotations["notify.dev/postgres-role"]
		if role != "notify_"+svc {
			t.Errorf("%s: Secret %s is for role %q, want notify_%s", svc, ref.Name, role, svc)
		}
		if !regexp.MustCompile(`(?m)^ALTER ROLE ` + role + ` +LOGIN\b`).Match(roles) {
			t.Errorf("%s: roles.sql makes no login role %s", svc, role)
		}
	}
}
