package streams

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

// asyncAPI is streams/asyncapi.yaml: the AsyncAPI 3.0 description of every
// topic notify produces or consumes and of its messages. Tests check it
// against the AsyncAPI 3.0.0 JSON Schema and the records a pipeline run
// actually produces against its message schemas.
//
//go:embed asyncapi.yaml
var asyncAPI []byte

// AsyncAPIYAML returns the AsyncAPI document as written.
func AsyncAPIYAML() []byte { return append([]byte(nil), asyncAPI...) }

// AsyncAPIJSON returns the AsyncAPI document converted to JSON.
func AsyncAPIJSON() ([]byte, error) {
	b, err := yaml.YAMLToJSON(asyncAPI)
	if err != nil {
		return nil, fmt.Errorf("streams/asyncapi.yaml: %w", err)
	}
	return b, nil
}
