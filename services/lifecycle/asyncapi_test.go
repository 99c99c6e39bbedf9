package lifecycle_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

// asyncAPI is streams/asyncapi.yaml with its schemas compiled (formats
// asserted: uuid, date-time).
type asyncAPI struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
}

func loadAsyncAPI(t *testing.T) *asyncAPI {
	t.Helper()
	raw, err := streams.AsyncAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	a := &asyncAPI{schemas: map[string]*jsonschema.Schema{}}
	if err := json.Unmarshal(raw, &a.doc); err != nil {
		t.Fatal(err)
	}
	res, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	a.compiler = jsonschema.NewCompiler()
	a.compiler.DefaultDraft(jsonschema.Draft7)
	a.compiler.AssertFormat()
	if err := a.compiler.AddResource("mem://asyncapi.json", res); err != nil {
		t.Fatal(err)
	}
	return a
}

// schema compiles the schema at a local pointer ("#/components/…").
func (a *asyncAPI) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	if s, ok := a.schemas[ptr]; ok {
		return s
	}
	s, err := a.compiler.Compile("mem://asyncapi.json" + ptr)
	if err != nil {
		t.Fatalf("compile %s: %v", ptr, err)
	}
	a.schemas[ptr] = s
	return s
}

// at resolves a local pointer in the document.
func (a *asyncAPI) at(t *testing.T, ptr string) map[string]any {
	t.Helper()
	var cur any = a.doc
	for _, p := range strings.Split(strings.TrimPrefix(ptr, "#/"), "/") {
		cur = cur.(map[string]any)[p]
	}
	m, ok := cur.(map[string]any)
	if !ok {
		t.Fatalf("%s is not an object in the document", ptr)
	}
	return m
}

// message is one message of a channel, with the pointers of its schemas.
type message struct {
	name                 string
	headers, payload     string // "" when the message gives no schema
	key                  map[string]any
	payloadProps         map[string]any
	payloadIsAnyEncoding bool
}

func (a *asyncAPI) messages(t *testing.T, address string) []message {
	t.Helper()
	for _, c := range a.doc["channels"].(map[string]any) {
		ch := c.(map[string]any)
		if ch["address"] != address {
			continue
		}
		var out []message
		for name, m := range ch["messages"].(map[string]any) {
			ref := m.(map[string]any)["$ref"].(string)
			msg := a.at(t, ref)
			mm := message{name: name, headers: msg["headers"].(map[string]any)["$ref"].(string)}
			p := msg["payload"].(map[string]any)
			if r, ok := p["$ref"].(string); ok {
				mm.payload = r
				mm.payloadProps, _ = a.at(t, r)["properties"].(map[string]any)
			} else {
				mm.payloadIsAnyEncoding = true
			}
			if b, ok := msg["bindings"].(map[string]any); ok {
				mm.key, _ = b["kafka"].(map[string]any)["key"].(map[string]any)
			}
			out = append(out, mm)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
		return out
	}
	t.Fatalf("no channel has address %s", address)
	return nil
}

// checkAgainstAsyncAPI validates records actually produced (by topic, with
// the test's prefix) against streams/asyncapi.yaml: each record matches the
// headers schema of exactly one message of its topic's channel, its value
// that message's payload schema (every member of it declared there), its
// key the message's Kafka key schema. It returns how many records matched
// each message.
func checkAgainstAsyncAPI(t *testing.T, e *env, byTopic map[string][]*kgo.Record) map[string]int {
	t.Helper()
	a := loadAsyncAPI(t)
	seen := map[string]int{}
	for topic, recs := range byTopic {
		address := strings.TrimPrefix(topic, e.topics.Prefix)
		msgs := a.messages(t, address)
		for _, r := range recs {
			hdrs := map[string]any{}
			for _, h := range r.Headers {
				hdrs[h.Key] = string(h.Value)
			}
			var match []message
			for _, m := range msgs {
				if a.schema(t, m.headers).Validate(hdrs) == nil {
					match = append(match, m)
				}
			}
			where := fmt.Sprintf("%s[%d]@%d (headers %v, value %.300s)", address, r.Partition, r.Offset, hdrs, r.Value)
			if len(match) != 1 {
				t.Errorf("%s: headers match %d messages of the channel, want exactly 1", where, len(match))
				continue
			}
			m := match[0]
			seen[m.name]++
			if m.key != nil {
				raw, _ := json.Marshal(m.key)
				key, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.Key))
				if err != nil {
					t.Errorf("%s: key %q is not JSON: %v", where, r.Key, err)
				} else if err := validateInline(raw, key); err != nil {
					t.Errorf("%s: key %s: %v", where, r.Key, err)
				}
			}
			if m.payloadIsAnyEncoding {
				continue
			}
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.Value))
			if err != nil {
				t.Errorf("%s: value is not JSON: %v", where, err)
				continue
			}
			if err := a.schema(t, m.payload).Validate(v); err != nil {
				t.Errorf("%s: not a %s: %v", where, m.name, err)
			}
			if obj, ok := v.(map[string]any); ok {
				for k := range obj {
					if _, ok := m.payloadProps[k]; !ok {
						t.Errorf("%s: member %q is not in the document's %s", where, k, m.name)
					}
				}
			}
		}
	}
	return seen
}

// validateInline validates v against a schema given as JSON.
func validateInline(schema []byte, v any) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	if err := c.AddResource("mem://key.json", doc); err != nil {
		return err
	}
	s, err := c.Compile("mem://key.json")
	if err != nil {
		return err
	}
	return s.Validate(v)
}
