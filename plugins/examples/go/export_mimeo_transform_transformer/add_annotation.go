// Package export_mimeo_transform_transformer is add-annotation, a mimeo transform plugin in Go
// (the standard Go toolchain, GOOS=wasip1, with bindings from wit-bindgen's Go generator).
//
// It adds one annotation to `metadata.annotations` of every copy. Config:
//
//	{"key": "example.com/tenant", "value": "{{target.namespace}}"}
//
// `key` is required, non-empty and must not start with `mimeo.dev/` (mimeo's own annotations);
// `value` defaults to "" and may contain `{{target.namespace}}`, replaced with the namespace the
// copy is going to, and `{{inputs}}`, replaced with the names of the context's inputs joined by
// `,` (empty when there are none). When the annotation already has that value the copy is left
// `unchanged`.
//
// The generated bindings call the three functions below: the package name and the function
// names are fixed by the generator (export_<interface>, one Go function per WIT function).
package export_mimeo_transform_transformer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"wit_component/mimeo_transform_log"
	"wit_component/mimeo_transform_types"
)

const (
	name           = "add-annotation-go"
	version        = "0.1.0"
	reservedPrefix = "mimeo.dev/"
	template       = "{{target.namespace}}"
	inputsTemplate = "{{inputs}}"
)

func Describe() mimeo_transform_types.PluginInfo {
	return mimeo_transform_types.PluginInfo{
		Name:    name,
		Version: version,
		Description: "Adds one annotation (key and value from the config; {{target.namespace}} " +
			"and {{inputs}} in the value are replaced) to every copy. Written in Go.",
		Kinds: []string{},
	}
}

func ValidateConfig(config string) witTypes.Result[witTypes.Unit, string] {
	if _, _, err := parseConfig(config); err != nil {
		return witTypes.Err[witTypes.Unit](err.Error())
	}
	return witTypes.Ok[witTypes.Unit, string](witTypes.Unit{})
}

func Transform(ctx mimeo_transform_types.Context, object string) witTypes.Result[mimeo_transform_types.Outcome, string] {
	outcome, err := transform(ctx, object)
	if err != nil {
		return witTypes.Err[mimeo_transform_types.Outcome](err.Error())
	}
	return witTypes.Ok[mimeo_transform_types.Outcome, string](outcome)
}

// parseConfig returns the key and value, or the error the rule's status shows.
func parseConfig(config string) (key, value string, err error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(config), &fields); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return "", "", errors.New("config must be a JSON object")
		}
		return "", "", fmt.Errorf("config is not valid JSON: %v", err)
	}
	if fields == nil { // the config was `null`
		return "", "", errors.New("config must be a JSON object")
	}
	raw, ok := fields["key"]
	if !ok || isNull(raw) {
		return "", "", errors.New("config.key is required")
	}
	if err := json.Unmarshal(raw, &key); err != nil {
		return "", "", errors.New("config.key must be a string")
	}
	if key == "" {
		return "", "", errors.New("config.key must not be empty")
	}
	if strings.HasPrefix(key, reservedPrefix) {
		return "", "", fmt.Errorf("config.key must not start with %s (mimeo's own annotations)", reservedPrefix)
	}
	if raw, ok := fields["value"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &value); err != nil {
			return "", "", errors.New("config.value must be a string")
		}
	}
	return key, value, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// decodeObject decodes a JSON object into its members, leaving each member's value as raw JSON:
// what this plugin does not change is written back as it came (numbers keep their digits). Go's
// encoder writes map keys sorted, so member order can change at the levels decoded here.
func decodeObject(raw []byte) (map[string]json.RawMessage, bool) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return nil, false
	}
	return members, true
}

func transform(ctx mimeo_transform_types.Context, object string) (mimeo_transform_types.Outcome, error) {
	var none mimeo_transform_types.Outcome
	key, value, err := parseConfig(ctx.Config)
	if err != nil {
		return none, err
	}
	if strings.Contains(value, template) {
		if ctx.Target.Namespace.IsNone() {
			return none, fmt.Errorf("config.value uses %s but the target has no namespace (cluster-scoped)", template)
		}
		value = strings.ReplaceAll(value, template, ctx.Target.Namespace.Some())
	}
	if strings.Contains(value, inputsTemplate) {
		names := make([]string, len(ctx.Inputs))
		for i, input := range ctx.Inputs {
			names[i] = input.Name
		}
		value = strings.ReplaceAll(value, inputsTemplate, strings.Join(names, ","))
	}

	if !json.Valid([]byte(object)) {
		var v any
		return none, fmt.Errorf("object is not valid JSON: %v", json.Unmarshal([]byte(object), &v))
	}
	obj, ok := decodeObject([]byte(object))
	if !ok {
		return none, errors.New("object must be a JSON object")
	}
	metadata, ok := decodeObject(obj["metadata"])
	if !ok {
		return none, errors.New("object.metadata must be an object")
	}
	annotations := map[string]json.RawMessage{}
	if raw, present := metadata["annotations"]; present && !isNull(raw) {
		if annotations, ok = decodeObject(raw); !ok {
			return none, errors.New("metadata.annotations must be an object")
		}
	}

	var current string
	if raw, present := annotations[key]; present && json.Unmarshal(raw, &current) == nil && current == value {
		mimeo_transform_log.Log(mimeo_transform_log.Level_Info,
			fmt.Sprintf("annotation %s already set on the copy of %s", key, describeSource(ctx)))
		return mimeo_transform_types.MakeOutcomeUnchanged(), nil
	}

	if annotations[key], err = marshal(value); err != nil {
		return none, err
	}
	if metadata["annotations"], err = marshal(annotations); err != nil {
		return none, err
	}
	if obj["metadata"], err = marshal(metadata); err != nil {
		return none, err
	}
	out, err := marshal(obj)
	if err != nil {
		return none, err
	}
	mimeo_transform_log.Log(mimeo_transform_log.Level_Info,
		fmt.Sprintf("set annotation %s on the copy of %s", key, describeSource(ctx)))
	return mimeo_transform_types.MakeOutcomeWrite(string(out)), nil
}

// marshal is json.Marshal without HTML escaping (`<`, `>` and `&` stay as they are).
func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func describeSource(ctx mimeo_transform_types.Context) string {
	src := ctx.Source
	if src.Namespace.IsSome() {
		return fmt.Sprintf("%s %s/%s", src.Kind, src.Namespace.Some(), src.Name)
	}
	return fmt.Sprintf("%s %s", src.Kind, src.Name)
}
