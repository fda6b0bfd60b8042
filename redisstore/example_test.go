package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// Two replicas share a key of RPM 2 through one Redis (here a miniredis):
// between them they take two requests in a minute, not four.
func ExampleNew() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	var replicas []*redisstore.Store
	for range 2 {
		client := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer client.Close()
		s, err := redisstore.New(client)
		if err != nil {
			panic(err)
		}
		defer s.Close()
		replicas = append(replicas, s)
	}
	t := keypool.Claim{Provider: "openai", KeyID: "k1", Model: "gpt-4o-mini", Limits: keypool.Limits{RPM: 2}}
	for i := range 4 {
		t.Now = time.Now()
		g, err := replicas[i%2].Take(context.Background(), t)
		if err != nil {
			panic(err)
		}
		fmt.Printf("replica %d: granted %v, reason %s\n", i%2+1, g.OK, g.Reason)
	}
	// Output:
	// replica 1: granted true, reason none
	// replica 2: granted true, reason none
	// replica 1: granted false, reason rate
	// replica 2: granted false, reason rate
}
