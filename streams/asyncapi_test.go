package streams_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/notify-dev/notify/streams"
)

// asyncAPISchemaID is the $id of testdata/asyncapi-3.0.0.schema.json, the
// AsyncAPI 3.0.0 JSON Schema (schemas/3.0.0.json of asyncapi/spec-json-schemas,
// Apache-2.0, every definition it refers to bundled in it), pinned so the
// test needs no network.
const asyncAPISchemaID = "http://asyncapi.com/definitions/3.0.0/asyncapi.json"

// offline refuses every URL the compiler did not get as a resource: a
// reference the pinned schema does not bundle fails the test instead of
// reaching for the network.
type offline struct{}

func (offline) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is not bundled in the pinned schema (no network in tests)", url)
}

func asyncAPIDoc(t *testing.T) (raw []byte, doc map[string]any) {
	t.Helper()
	raw, err := streams.AsyncAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return raw, doc
}

// The document is a valid AsyncAPI 3.0.0 document: it passes the official
// JSON Schema of the specification, with its Kafka bindings.
func TestAsyncAPIIsValidAsyncAPI3(t *testing.T) {
	raw, _ := asyncAPIDoc(t)
	spec, err := os.ReadFile("testdata/asyncapi-3.0.0.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	specDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(offline{})
	if err := c.AddResource(asyncAPISchemaID, specDoc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(asyncAPISchemaID)
	if err != nil {
		t.Fatalf("compile the AsyncAPI 3.0.0 schema: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("streams/asyncapi.yaml is not valid AsyncAPI 3.0.0:\n%v", err)
	}

	// The check can fail: a document without its required info is refused.
	var broken map[string]any
	_ = json.Unmarshal(raw, &broken)
	delete(broken, "info")
	if err := sch.Validate(broken); err == nil {
		t.Fatal("the schema accepted a document without info")
	}
}

// resolve follows a local $ref ("#/a/b") in doc.
func resolve(doc map[string]any, ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %q is not local", ref)
	}
	var cur any = doc
	for _, p := range strings.Split(ref[2:], "/") {
		p = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q: %q is not in an object", ref, p)
		}
		if cur, ok = m[p]; !ok {
			return nil, fmt.Errorf("$ref %q: no %q", ref, p)
		}
	}
	return cur, nil
}

// deref returns v, or what its $ref points to.
func deref(t *testing.T, doc map[string]any, v any) map[string]any {
	t.Helper()
	m, _ := v.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		r, err := resolve(doc, ref)
		if err != nil {
			t.Fatal(err)
		}
		m, _ = r.(map[string]any)
	}
	if m == nil {
		t.Fatalf("%v is not an object", v)
	}
	return m
}

// The document describes exactly the topics notify creates, with their
// partition counts, every lifecycle type, and is consistent with itself:
// every $ref resolves, each operation's messages are its channel's, each
// outbox message's eventType header is its name, and every schema
// compiles.
func TestAsyncAPIDescribesEveryTopic(t *testing.T) {
	raw, doc := asyncAPIDoc(t)

	// Every $ref resolves.
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				if _, err := resolve(doc, ref); err != nil {
					t.Error(err)
				}
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(doc)

	// The channels are the topics EnsureTopics creates.
	topics := streams.DefaultTopics()
	want := map[string]float64{}
	for _, s := range topics.Specs() {
		want[s.Name] = float64(s.Partitions)
	}
	channels := doc["channels"].(map[string]any)
	got := map[string]float64{}
	for name, c := range channels {
		ch := c.(map[string]any)
		addr, _ := ch["address"].(string)
		parts, _ := ch["bindings"].(map[string]any)["kafka"].(map[string]any)["partitions"].(float64)
		got[addr] = parts
		if len(ch["messages"].(map[string]any)) == 0 {
			t.Errorf("channel %s has no messages", name)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("channels (address: partitions) %v, want the topics %v", got, want)
	}

	// The lifecycle channel carries every lifecycle type.
	var lifecycle []string
	for name := range channels["lifecycle"].(map[string]any)["messages"].(map[string]any) {
		lifecycle = append(lifecycle, name)
	}
	sort.Strings(lifecycle)
	wantTypes := slices.Clone(streams.LifecycleTypes)
	sort.Strings(wantTypes)
	if fmt.Sprint(lifecycle) != fmt.Sprint(wantTypes) {
		t.Errorf("lifecycle messages %v, want %v", lifecycle, wantTypes)
	}
	if channels["lifecycle"].(map[string]any)["address"] != topics.Lifecycle() {
		t.Errorf("lifecycle address %v, want %s", channels["lifecycle"].(map[string]any)["address"], topics.Lifecycle())
	}

	// Operations use their channel's messages.
	for name, o := range doc["operations"].(map[string]any) {
		op := o.(map[string]any)
		chRef := op["channel"].(map[string]any)["$ref"].(string)
		for _, m := range op["messages"].([]any) {
			ref := m.(map[string]any)["$ref"].(string)
			if !strings.HasPrefix(ref, chRef+"/messages/") {
				t.Errorf("operation %s: message %s is not one of %s", name, ref, chRef)
			}
		}
	}

	// Outbox messages: eventType header = the message name; Kafka key given.
	for cname, c := range channels {
		ch := c.(map[string]any)
		if !strings.HasPrefix(ch["address"].(string), "outbox.event.") {
			continue
		}
		for name, m := range ch["messages"].(map[string]any) {
			msg := deref(t, doc, m)
			if msg["name"] != name {
				t.Errorf("channel %s: message %s is named %v", cname, name, msg["name"])
			}
			hdr := deref(t, doc, msg["headers"])
			found := false
			for _, part := range hdr["allOf"].([]any) {
				if p, ok := part.(map[string]any)["properties"].(map[string]any); ok {
					found = found || p["eventType"].(map[string]any)["const"] == name
				}
			}
			if !found {
				t.Errorf("message %s: its headers do not fix eventType to %q", name, name)
			}
			if _, ok := msg["bindings"].(map[string]any)["kafka"].(map[string]any)["key"]; !ok {
				t.Errorf("message %s: no Kafka key", name)
			}
		}
	}

	// Every component schema compiles (AsyncAPI schemas are JSON Schema
	// draft 7 supersets; notify's use none of the extensions).
	docRes, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.UseLoader(offline{})
	if err := c.AddResource("mem://asyncapi.json", docRes); err != nil {
		t.Fatal(err)
	}
	for name := range doc["components"].(map[string]any)["schemas"].(map[string]any) {
		if _, err := c.Compile("mem://asyncapi.json#/components/schemas/" + name); err != nil {
			t.Errorf("schema %s: %v", name, err)
		}
	}
}
