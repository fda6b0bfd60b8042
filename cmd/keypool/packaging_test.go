package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The files that package and deploy the command — the example
// configuration, the Dockerfile, compose.yaml, the systemd unit and the
// Grafana dashboard — are held here to what the command does.

// exampleEnv is a value for each variable keypool.example.yaml names.
var exampleEnv = map[string]string{
	"KEYPOOL_PROXY_TOKEN":    "kp-example-proxy-token-0123456789",
	"KEYPOOL_OPERATOR_TOKEN": "kp-example-operator-token-0123456789",
	"GROQ_KEY_1":             "gsk-example-one",
	"GROQ_KEY_2":             "gsk-example-two",
	"OPENAI_KEY_1":           "sk-example-one",
	"OPENAI_KEY_2":           "sk-example-two",
}

// TestExampleConfigChecks runs keypool check on keypool.example.yaml as it
// is, in a directory of its own (its state is relative), with the
// variables it names set: no mistake and no warning.
func TestExampleConfigChecks(t *testing.T) {
	path := filepath.Join(repoRoot(t), "keypool.example.yaml")
	t.Chdir(t.TempDir())
	status, stdout, stderr := runCommand(t, exampleEnv, "check", "-config", path)
	require.Equal(t, 0, status, "keypool check on keypool.example.yaml:\n%s%s", stdout, stderr)
	assert.Contains(t, stdout, "no mistakes: 2 upstreams, 4 keys")
	assert.Empty(t, stderr, "warnings")

	// The check can fail: without a variable the file names, it does.
	t.Setenv("OPENAI_KEY_2", "")
	status, _, stderr = runCommand(t, nil, "check", "-config", path)
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, stderr, "OPENAI_KEY_2 is not set")
}

// TestExampleConfigNamesEveryField holds keypool.example.yaml to every
// field of the configuration: each YAML name of config, upstream, keyRef,
// limits, affinity, calendarDay, price and budget appears in it as a key,
// written out or commented out.
func TestExampleConfigNamesEveryField(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "keypool.example.yaml"))
	require.NoError(t, err)
	text := string(data)
	for _, name := range yamlFieldNames(config{}) {
		assert.True(t, strings.Contains(text, name+":"), "keypool.example.yaml does not name %s", name)
	}
}

// yamlFieldNames returns the YAML names of the fields of v's struct type
// and of every struct type its fields hold, through pointers, slices and
// maps, each once.
func yamlFieldNames(v any) []string {
	var names []string
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
				names = append(names, name)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(v))
	return names
}
