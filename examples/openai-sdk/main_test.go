package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// The example against a fake vendor, one of whose keys is revoked: the
// request goes to the other key and the caller sees one answer. (This test
// uses keypool's internal fake vendor; the example itself does not.)
func TestExample(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, OutputTokens: 3, Keys: []vendorsim.Key{
		{Secret: "sk-revoked", ID: "revoked", Revoked: true},
		{Secret: "sk-good", ID: "good"},
	}})
	t.Cleanup(sim.Close)
	t.Setenv("OPENAI_BASE_URL", sim.URL()+"/v1")
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, "sk-revoked, sk-good"))
	assert.Contains(t, out.String(), "sim sim sim\n")
	assert.Contains(t, out.String(), "sent 1, answers map[auth:1]")
	assert.Contains(t, out.String(), "sent 1, answers map[none:1]")
	assert.NotContains(t, out.String(), "sk-", "no secret in the output")

	assert.ErrorContains(t, run(t.Context(), &out, " , "), "set OPENAI_KEYS")
}
