package redisstore

import (
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The Lua esc of the prelude and the Go escape agree on every byte, alone
// and within a name, on a real Redis.
func TestLuaEscapeMatchesGo(t *testing.T) {
	addr := os.Getenv("KEYPOOL_REDIS_ADDR")
	if addr == "" {
		t.Skip("no Redis")
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	i := strings.Index(prelude, "local function esc(s)")
	j := strings.Index(prelude[i:], "\nend\n")
	fn := prelude[i : i+j+5]
	script := fn + "local out = {}\nfor k = 1, #ARGV do out[k] = esc(ARGV[k]) end\nreturn out\n"
	var args []any
	var want []string
	for b := 0; b < 256; b++ {
		s := "a" + string([]byte{byte(b)}) + "z"
		args = append(args, s)
		want = append(want, escape(s))
	}
	args = append(args, "n:ü {x}%", "\x00other", "")
	want = append(want, escape("n:ü {x}%"), escape("\x00other"), escape(""))
	got, err := c.Eval(t.Context(), script, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("arg %q: Lua %q, Go %q", args[k], got[k], want[k])
		}
	}
}
