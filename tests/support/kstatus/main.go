// kstatus reads Kubernetes objects as JSON (one object, or a List) on stdin and prints, for each,
// what kstatus (sigs.k8s.io/cli-utils/pkg/kstatus, the library behind Flux's health checks, kpt
// and `kubectl wait`-like tooling) computes of it: `<kind>/<name> <status> <message>`, one line
// per object. mimeo's tests run it on the rules, RemoteClusters and inventories a real apiserver
// holds, so that the conditions are read by the library that GitOps tools read them with.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	input, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err != nil {
		fail("reading stdin: %v", err)
	}
	var object map[string]interface{}
	// apimachinery's JSON keeps integers int64, as kstatus reads metadata.generation.
	if err := json.Unmarshal(input, &object); err != nil {
		fail("stdin is not a JSON object: %v", err)
	}
	items := []interface{}{object}
	if list, ok := object["items"].([]interface{}); ok {
		items = list
	}
	for _, item := range items {
		fields, ok := item.(map[string]interface{})
		if !ok {
			fail("an item is not an object")
		}
		u := &unstructured.Unstructured{Object: fields}
		result, err := status.Compute(u)
		if err != nil {
			fail("%s/%s: %v", u.GetKind(), u.GetName(), err)
		}
		fmt.Printf("%s/%s %s %s\n", u.GetKind(), u.GetName(), result.Status, result.Message)
	}
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "kstatus: "+format+"\n", args...)
	os.Exit(1)
}
