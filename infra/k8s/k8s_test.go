// Package k8s holds the Kubernetes manifests of notify (kustomization.yaml and the files it
// lists, plus secrets.yaml); this test decodes every document strictly into the Kubernetes
// API types, so a misspelt or misplaced field fails CI instead of being dropped by the API
// server, and checks what the types cannot: probes on the endpoints the binary serves,
// secrets that exist, selectors that match, one active connector.
package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/notify-dev/notify/streams"
)

// kustomization is the part of kustomize's Kustomization these manifests use; strict
// decoding refuses any other field, as the Kubernetes types do.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
		IncludeTemplates bool              `json:"includeTemplates"`
	} `json:"labels"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
		Digest  string `json:"digest"`
	} `json:"images"`
}

// kinds maps apiVersion/kind to the Go type a document decodes into.
var kinds = map[string]func() any{
	"v1/Namespace":                           func() any { return new(corev1.Namespace) },
	"v1/ConfigMap":                           func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                              func() any { return new(corev1.Secret) },
	"v1/Service":                             func() any { return new(corev1.Service) },
	"apps/v1/Deployment":                     func() any { return new(appsv1.Deployment) },
	"batch/v1/Job":                           func() any { return new(batchv1.Job) },
	"policy/v1/PodDisruptionBudget":          func() any { return new(policyv1.PodDisruptionBudget) },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"networking.k8s.io/v1/NetworkPolicy":     func() any { return new(networkingv1.NetworkPolicy) },
}

// manifests is every decoded document, by file.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	jobs        map[string]*batchv1.Job
	services    map[string]*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	policies    []*networkingv1.NetworkPolicy
	secrets     map[string]*corev1.Secret
	configMaps  map[string]*corev1.ConfigMap
	namespaces  []string
	all         []object
}

type object struct {
	file, kind, name, namespace string
}

// decodeStrict decodes one YAML document into v, refusing unknown and duplicate fields.
func decodeStrict(doc []byte, v any) error {
	return yaml.UnmarshalStrict(doc, v)
}

// splitDocuments splits a multi-document YAML file on its "---" lines, dropping documents
// that are only comments.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(b), -1) {
		empty := true
		for _, line := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				empty = false
			}
		}
		if !empty {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func loadFile(t *testing.T, m *manifests, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, doc := range splitDocuments(b) {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("%s document %d: %v", file, i+1, err)
		}
		key := u.GetAPIVersion() + "/" + u.GetKind()
		mk, ok := kinds[key]
		if !ok {
			t.Fatalf("%s document %d: kind %q is not one this test knows; add its type to kinds", file, i+1, key)
		}
		v := mk()
		if err := decodeStrict(doc, v); err != nil {
			t.Fatalf("%s document %d (%s %s): %v", file, i+1, key, u.GetName(), err)
		}
		o := object{file: file, kind: u.GetKind(), name: u.GetName(), namespace: u.GetNamespace()}
		if o.name == "" {
			t.Errorf("%s document %d: no metadata.name", file, i+1)
		}
		for _, p := range m.all {
			if p.kind == o.kind && p.name == o.name {
				t.Errorf("%s %s is defined in %s and %s", o.kind, o.name, p.file, o.file)
			}
		}
		m.all = append(m.all, o)
		switch x := v.(type) {
		case *appsv1.Deployment:
			m.deployments[x.Name] = x
		case *batchv1.Job:
			m.jobs[x.Name] = x
		case *corev1.Service:
			m.services[x.Name] = x
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, x)
		case *autoscalingv2.HorizontalPodAutoscaler:
			m.hpas = append(m.hpas, x)
		case *networkingv1.NetworkPolicy:
			m.policies = append(m.policies, x)
		case *corev1.Secret:
			m.secrets[x.Name] = x
		case *corev1.ConfigMap:
			m.configMaps[x.Name] = x
		case *corev1.Namespace:
			m.namespaces = append(m.namespaces, x.Name)
		}
	}
}

// load reads kustomization.yaml, every file it lists and secrets.yaml (applied on its
// own), and fails when a YAML file of this folder is neither.
func load(t *testing.T) (*kustomization, *manifests) {
	t.Helper()
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := decodeStrict(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml is %s %s", k.APIVersion, k.Kind)
	}
	m := &manifests{deployments: map[string]*appsv1.Deployment{}, jobs: map[string]*batchv1.Job{},
		services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	files := append(slices.Clone(k.Resources), "secrets.yaml")
	for _, f := range files {
		loadFile(t, m, f)
	}
	all, _ := filepath.Glob("*.yaml")
	for _, f := range all {
		if f != "kustomization.yaml" && !slices.Contains(files, f) {
			t.Errorf("%s is neither in kustomization.yaml's resources nor secrets.yaml: it would never be applied", f)
		}
	}
	return &k, m
}

func TestManifestsDecodeStrictly(t *testing.T) {
	k, m := load(t)
	if len(m.all) == 0 {
		t.Fatal("no documents")
	}
	for _, o := range m.all {
		if o.kind != "Namespace" && o.namespace != k.Namespace {
			t.Errorf("%s %s (%s): namespace %q, kustomization's is %q", o.kind, o.name, o.file, o.namespace, k.Namespace)
		}
	}
	if !slices.Contains(m.namespaces, k.Namespace) {
		t.Errorf("no Namespace %s", k.Namespace)
	}
}

// TestStrictDecodingRefusesTypos: the decoding this test relies on fails on a misspelt
// field, a field in the wrong place and a duplicate, rather than dropping them.
func TestStrictDecodingRefusesTypos(t *testing.T) {
	b, err := os.ReadFile("api.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := splitDocuments(b)[0]
	var ok appsv1.Deployment
	if err := decodeStrict(doc, &ok); err != nil {
		t.Fatalf("api.yaml as it is: %v", err)
	}
	for name, mutate := range map[string]func(string) string{
		"misspelt field": func(s string) string { return strings.Replace(s, "readinessProbe:", "readynessProbe:", 1) },
		"misplaced field": func(s string) string {
			return strings.Replace(s, "  replicas: 2\n", "  replicas: 2\n  containers: []\n", 1)
		},
		"duplicate field": func(s string) string {
			return strings.Replace(s, "  replicas: 2\n", "  replicas: 2\n  replicas: 3\n", 1)
		},
		"wrong type": func(s string) string { return strings.Replace(s, "  replicas: 2\n", "  replicas: two\n", 1) },
	} {
		bad := mutate(string(doc))
		if bad == string(doc) {
			t.Fatalf("%s: the mutation changed nothing", name)
		}
		var d appsv1.Deployment
		if err := decodeStrict([]byte(bad), &d); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// service is what each notify component must look like.
type service struct {
	deployment string
	args       []string // the container's args start with these
	// probe paths: the endpoints that binary serves on that port.
	liveness, readiness string
	port                int32 // the probes'
	metricsPort         int32 // Prometheus scrapes /metrics here
	// env the component refuses to start without (beyond NOTIFY_DATABASE_URL).
	requires []string
	pdb      bool
}

var components = []service{
	{"notify-api", []string{"run", "api", "--addr", ":8080", "--metrics-addr", ":9104"}, "/healthz", "/readyz", 8080, 9104,
		[]string{"NOTIFY_API_JWT_SECRET", "NOTIFY_VAPID_PUBLIC_KEY", "NOTIFY_RECEIPT_KEY"}, true},
	{"notify-cdc", []string{"run", "cdc", "--metrics-addr", ":9101"}, "/metrics", "/metrics", 9101, 9101,
		[]string{"NOTIFY_KAFKA_BROKERS"}, false},
	{"notify-fanout", []string{"run", "fanout", "--metrics-addr", ":9102"}, "/metrics", "/metrics", 9102, 9102,
		[]string{"NOTIFY_KAFKA_BROKERS"}, true},
	{"notify-push", []string{"run", "push", "--metrics-addr", ":9103"}, "/metrics", "/metrics", 9103, 9103,
		[]string{"NOTIFY_KAFKA_BROKERS", "NOTIFY_VAPID_PRIVATE_KEY", "NOTIFY_VAPID_SUBJECT", "NOTIFY_RECEIPT_KEY"}, true},
}

func TestDeployments(t *testing.T) {
	_, m := load(t)
	for _, c := range components {
		t.Run(c.deployment, func(t *testing.T) {
			d, ok := m.deployments[c.deployment]
			if !ok {
				t.Fatalf("no Deployment %s", c.deployment)
			}
			sel, err := metaSelector(d.Spec.Selector)
			if err != nil {
				t.Fatal(err)
			}
			if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("selector %s does not match the pod labels %v", sel, d.Spec.Template.Labels)
			}
			pod := d.Spec.Template.Spec
			checkPod(t, m, pod, c.requires)
			ctr := pod.Containers[0]
			if len(ctr.Args) < len(c.args) || !slices.Equal(ctr.Args[:len(c.args)], c.args) {
				t.Errorf("args %q, want them to start with %q", ctr.Args, c.args)
			}
			for _, p := range []struct {
				name, path string
				probe      *corev1.Probe
			}{{"startup", c.liveness, ctr.StartupProbe}, {"liveness", c.liveness, ctr.LivenessProbe}, {"readiness", c.readiness, ctr.ReadinessProbe}} {
				checkProbe(t, p.name, p.probe, p.path, ctr, c.port)
			}
			if annotation := d.Spec.Template.Annotations["prometheus.io/port"]; annotation != fmt.Sprint(c.metricsPort) {
				t.Errorf("prometheus.io/port %q, the metrics are on %d", annotation, c.metricsPort)
			}
			if containerPort(ctr, intstr.FromInt32(c.metricsPort)) == 0 {
				t.Errorf("no containerPort %d for the metrics", c.metricsPort)
			}
			if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds <= 30 {
				t.Errorf("terminationGracePeriodSeconds must exceed --stop-timeout (30s), or the kubelet kills in-flight work")
			}
			var budgets int
			for _, b := range m.pdbs {
				s, err := metaSelector(b.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				if s.Matches(labels.Set(d.Spec.Template.Labels)) {
					budgets++
					if b.Spec.MinAvailable == nil && b.Spec.MaxUnavailable == nil {
						t.Errorf("PodDisruptionBudget %s sets neither minAvailable nor maxUnavailable", b.Name)
					}
				}
			}
			if c.pdb && budgets != 1 {
				t.Errorf("%d PodDisruptionBudgets select it, want 1", budgets)
			}
			if !c.pdb && budgets != 0 {
				t.Errorf("%d PodDisruptionBudgets select the single connector; one would block node drains", budgets)
			}
		})
	}
	if len(m.deployments) != len(components) {
		t.Errorf("%d Deployments, this test knows %d: add the new one to components", len(m.deployments), len(components))
	}
}

// checkPod: resources, no dev mode, non-root, every referenced Secret/ConfigMap key exists,
// and the settings the binary requires are set.
func checkPod(t *testing.T, m *manifests, pod corev1.PodSpec, requires []string) {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("pod securityContext.runAsNonRoot is not true")
	}
	ctr := pod.Containers[0]
	if ctr.Image != "notify" {
		t.Errorf("image %q: use the name kustomization.yaml's images entry rewrites (notify)", ctr.Image)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := ctr.Resources.Requests[r]; !ok || q.IsZero() {
			t.Errorf("no %s request", r)
		}
	}
	if q, ok := ctr.Resources.Limits[corev1.ResourceMemory]; !ok || q.Cmp(ctr.Resources.Requests[corev1.ResourceMemory]) < 0 {
		t.Errorf("memory limit missing or below the request")
	}
	set := map[string]bool{}
	for _, f := range ctr.EnvFrom {
		switch {
		case f.ConfigMapRef != nil:
			cm, ok := m.configMaps[f.ConfigMapRef.Name]
			if !ok {
				t.Errorf("envFrom ConfigMap %s does not exist", f.ConfigMapRef.Name)
				continue
			}
			for k := range cm.Data {
				set[k] = true
			}
		default:
			t.Errorf("envFrom other than a ConfigMap: name each secret key instead")
		}
	}
	for _, e := range ctr.Env {
		set[e.Name] = true
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			s, ok := m.secrets[ref.Name]
			if !ok {
				t.Errorf("env %s: Secret %s is not in secrets.yaml", e.Name, ref.Name)
			} else if _, ok := s.StringData[ref.Key]; !ok {
				t.Errorf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			if ref.Optional != nil && *ref.Optional {
				t.Errorf("env %s: optional secret; a missing one must stop the pod from starting", e.Name)
			}
		}
	}
	if set["NOTIFY_DEV"] {
		t.Errorf("NOTIFY_DEV is set: dev mode runs on public secrets and is refused beyond loopback")
	}
	for _, r := range append([]string{"NOTIFY_DATABASE_URL"}, requires...) {
		if !set[r] {
			t.Errorf("%s is not set; the binary refuses to start without it", r)
		}
	}
	if sc := ctr.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container securityContext must forbid privilege escalation and keep the root filesystem read-only")
	}
}

func checkProbe(t *testing.T, name string, p *corev1.Probe, path string, ctr corev1.Container, port int32) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("no %s httpGet probe", name)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s probe on %s, want %s (the endpoint this binary serves there)", name, p.HTTPGet.Path, path)
	}
	if got := containerPort(ctr, p.HTTPGet.Port); got != port {
		t.Errorf("%s probe on port %v = %d, want %d", name, p.HTTPGet.Port.String(), got, port)
	}
}

// containerPort resolves a named or numbered port of ctr (0 when it has none such).
func containerPort(ctr corev1.Container, p intstr.IntOrString) int32 {
	for _, cp := range ctr.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort
		}
	}
	return 0
}

func metaSelector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, fmt.Errorf("no selector")
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err == nil && sel.Empty() {
		err = fmt.Errorf("empty selector: it would select every pod")
	}
	return sel, err
}

// TestConnectorSingleActive: one connector streams from the slot; an update stops the old
// pod before starting the new one.
func TestConnectorSingleActive(t *testing.T) {
	_, m := load(t)
	d := m.deployments["notify-cdc"]
	if d == nil {
		t.Fatal("no notify-cdc")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q, want Recreate", d.Spec.Strategy.Type)
	}
	for _, h := range m.hpas {
		if h.Spec.ScaleTargetRef.Name == d.Name {
			t.Errorf("HPA %s scales the connector", h.Name)
		}
	}
}

// TestPushScalesOnLag: the push workers' replica count follows the consumer lag the
// workers export, bounded by the partitions that can be shared.
func TestPushScalesOnLag(t *testing.T) {
	_, m := load(t)
	if len(m.hpas) != 1 {
		t.Fatalf("%d HPAs, want 1 (push)", len(m.hpas))
	}
	h := m.hpas[0]
	ref := h.Spec.ScaleTargetRef
	d := m.deployments[ref.Name]
	if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || d == nil || d.Name != "notify-push" {
		t.Fatalf("HPA scales %s %s %s, want the push Deployment", ref.APIVersion, ref.Kind, ref.Name)
	}
	if d.Spec.Replicas != nil {
		t.Errorf("notify-push sets replicas: every apply would reset what the HPA chose")
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 {
		t.Errorf("minReplicas %v", h.Spec.MinReplicas)
	}
	if max := streams.DefaultTopics().PushPartitions; h.Spec.MaxReplicas > max {
		t.Errorf("maxReplicas %d > %d push partitions: the extra workers would be idle", h.Spec.MaxReplicas, max)
	}
	if len(h.Spec.Metrics) != 1 {
		t.Fatalf("%d metrics", len(h.Spec.Metrics))
	}
	mt := h.Spec.Metrics[0]
	if mt.Type != autoscalingv2.ExternalMetricSourceType || mt.External == nil {
		t.Fatalf("metric type %s, want External", mt.Type)
	}
	// The series the push worker exports (services/push/metrics.go).
	if mt.External.Metric.Name != "notify_push_group_lag_total" {
		t.Errorf("metric %s", mt.External.Metric.Name)
	}
	if mt.External.Target.Type != autoscalingv2.AverageValueMetricType || mt.External.Target.AverageValue == nil || mt.External.Target.AverageValue.IsZero() {
		t.Errorf("target %+v, want an AverageValue per worker", mt.External.Target)
	}
}

// TestAPIService: the Service reaches the api pods on their HTTP port.
func TestAPIService(t *testing.T) {
	_, m := load(t)
	s, d := m.services["notify-api"], m.deployments["notify-api"]
	if s == nil || d == nil {
		t.Fatal("no notify-api Service or Deployment")
	}
	if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("Service selector %v does not match the api pods", s.Spec.Selector)
	}
	for _, p := range s.Spec.Ports {
		if containerPort(d.Spec.Template.Spec.Containers[0], p.TargetPort) != 8080 {
			t.Errorf("Service port %s targets %s, not the api's port", p.Name, p.TargetPort.String())
		}
	}
}

// TestMigrateJob: the one-shot migration has what `notify migrate` needs.
func TestMigrateJob(t *testing.T) {
	_, m := load(t)
	j := m.jobs["notify-migrate"]
	if j == nil {
		t.Fatal("no Job notify-migrate")
	}
	checkPod(t, m, j.Spec.Template.Spec, []string{"NOTIFY_KAFKA_BROKERS"})
	if args := j.Spec.Template.Spec.Containers[0].Args; len(args) == 0 || args[0] != "migrate" {
		t.Errorf("args %q", args)
	}
}

// TestSecretsHoldNoValues: secrets.yaml is a template; a value committed there would be
// a secret in the repository.
func TestSecretsHoldNoValues(t *testing.T) {
	_, m := load(t)
	var names []string
	for n, s := range m.secrets {
		names = append(names, n)
		if len(s.Data) > 0 {
			t.Errorf("Secret %s has data; keep values out of the repository", n)
		}
		for k, v := range s.StringData {
			if v != "" {
				t.Errorf("Secret %s key %s has a value; keep values out of the repository", n, k)
			}
		}
	}
	sort.Strings(names)
	if !slices.Equal(names, []string{"notify-db-api", "notify-db-cdc", "notify-db-fanout", "notify-db-migrate", "notify-db-push", "notify-push-providers", "notify-secrets"}) {
		t.Errorf("Secrets %v", names)
	}
}
