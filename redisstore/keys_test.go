package redisstore

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEscape(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{"gpt-4o-mini", "gpt-4o-mini"},
		{"models/gemini-2.0-flash", "models/gemini-2.0-flash"},
		{"a:b", "a%3Ab"},
		{"{tag}", "%7Btag%7D"},
		{"100%", "100%25"},
		{"two words", "two%20words"},
		{"\x00other", "%00other"},
		{"é", "%C3%A9"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			assert.Equal(t, c.want, escape(c.in), "escape(%q)", c.in)
		})
	}
}

// tag returns the hash tag Redis Cluster hashes a key name by: what is
// between the first '{' and the next '}'.
func tag(name string) string {
	_, rest, ok := strings.Cut(name, "{")
	if !ok {
		return ""
	}
	t, _, ok := strings.Cut(rest, "}")
	if !ok {
		return ""
	}
	return t
}

func TestNamesShareThePoolsTagAndNeverCollide(t *testing.T) {
	cases := []struct{ provider, keyID, model string }{
		{"openai", "k1", "gpt-4o"},
		{"open}ai{", "k:1", "m{x}"},
		{"a:b", "c", "d"},
		{"a", "b:c", "d"},
		{"a", "b", "c:d"},
		{"a", "b%3Ac", "d"},
		{"", "k1", "m"}, // "{}" is no hash tag: Redis Cluster would hash each whole name
	}
	seen := map[string]int{}
	for i, c := range cases {
		n := names("keypool", c.provider, c.keyID)
		all := []string{n.index(), n.benches(), n.minute(c.model), n.day(c.model), n.calendar(c.model),
			n.capMinute(), n.capDay(), n.capCalendar()}
		for _, name := range all {
			assert.NotEmpty(t, tag(name), "the hash tag of %q", name)
			assert.Equal(t, poolTag(c.provider), tag(name), "the hash tag of %q", name)
			if j, ok := seen[name]; ok {
				t.Errorf("%q names keys of cases %d and %d", name, j, i)
			}
			seen[name] = i
		}
	}
}
