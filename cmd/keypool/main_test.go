package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRunUsage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		status int
		stderr string
	}{
		{"no command", nil, exitUsage, ""},
		{"unknown command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"bad flag", []string{"demo", "-nope"}, exitUsage, "flag provided but not defined"},
		{"too few keys", []string{"demo", "-keys", "2"}, exitUsage, "-keys 2: the demo needs at least 3 free keys"},
		{"bad duration", []string{"demo", "-duration", "-1s"}, exitUsage, "-duration -1s: must be positive"},
		{"stray argument", []string{"demo", "extra"}, exitUsage, `unexpected argument "extra"`},
		{"help", []string{"help"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got := run(t.Context(), tt.args, &stdout, &stderr)
			assert.Equal(t, tt.status, got, "exit status; stderr: %s", stderr.String())
			assert.Contains(t, stderr.String(), tt.stderr)
		})
	}
}

func TestDemoPrintsSummary(t *testing.T) {
	var stdout, stderr bytes.Buffer
	status := run(t.Context(), []string{"demo", "-duration", "3s", "-rate", "20"}, &stdout, &stderr)
	out := stdout.String()
	assert.Equal(t, 0, status, "stderr: %s", stderr.String())
	for _, want := range []string{"Summary after", "Benches by kind:", "The vendor answered", "Callers saw", "The paid key served", "free-1", "paid"} {
		assert.Contains(t, out, want)
	}
	assert.Contains(t, out, "benched free-5: auth", "the revoked key is benched")
	assert.NotContains(t, out, "sk-demo-", "no secret in the output")
	assert.False(t, strings.Contains(out, "\033["), "no terminal codes when stdout is not a terminal")
}
