// Package examples holds fairgate's example configs, embedded so that
// `fairgate demo` runs the very file a reader sees here.
package examples

import _ "embed"

// Demo is deploy/examples/demo.yaml: the seed scenario the demo runs.
//
//go:embed demo.yaml
var Demo []byte
